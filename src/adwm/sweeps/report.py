"""Result tables and plots from summary.json files: CSVs of every estimate and metric, a markdown table
(rows: estimators or grid variants; mean and bootstrap CI over seeds per metric), PNG plots."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from adwm.evaluation.metrics import mean_ci
from adwm.evaluation.plots import save_figure
from adwm.runtime.atomic import atomic_write_text

TABLE_METRICS = (
    ("spearman", "Spearman", "higher is better"),
    ("nrmse", "nRMSE", "lower is better"),
    ("regret_at_1", "regret@1", "lower is better"),
)

# `adwm fit`'s fidelity metrics (held-out episodes replayed with their logged actions; simulation/fidelity.py)
FIDELITY_METRICS = (
    ("state_acc@1", "state acc @1"),
    ("state_acc@5", "state acc @5"),
    ("state_acc@10", "state acc @10"),
    ("return_corr", "return corr"),
    ("sim_end_prob", "simulated end"),
    ("logged_end_rate", "logged end"),
)
# the controls' state accuracies, from the same replays (a fit made before a control existed lacks its row),
# the snap's ceiling (a perfect sample snapped) and the learned model picking among the analogy world's proposals
FIDELITY_CONTROLS = ("stay", "nearest", "analogy", "snap_ceiling", "guided_analogy")


ESTIMATOR_NOTE = (
    "`adwm_sim` is ADWM uncalibrated (the simulated returns alone: the number a user without the behaviour "
    "agents gets); `adwm` is calibrated (`evaluate.calibration`, which simulates the behaviour agents and so "
    "needs them, a privilege no baseline has). Where a run's `evaluate.calibration` is `none` there is no "
    "`adwm_sim` and `adwm` is the uncalibrated estimate."
)


def is_adwm(name: str) -> bool:
    """Whether a row is ADWM's own estimate (`adwm`, `adwm_sim`), which has a row per grid variant; the
    `adwm_dr`-style baselines that read the world model are baselines, shown once."""
    return name in ("adwm", "adwm_sim")


def estimator_rank(name: str) -> int:
    """Table order: ADWM uncalibrated first, then calibrated ADWM, then the baselines (each in its order)."""
    return 0 if name == "adwm_sim" else 1 if name == "adwm" else 2


def estimate_rows(summary: dict, labels: dict) -> list[dict]:
    """One row per (policy, estimator) of a main-job summary."""
    rows = []
    for p in summary["policies"]:
        for est, value in p["estimates"].items():
            lo, hi = p.get("ci", {}).get(est, [None, None])
            rows.append(
                {
                    **labels,
                    "policy": p["name"],
                    "J_true": p["J_true"],
                    "J_true_se": p["J_true_se"],
                    "estimator": est,
                    "J_hat": value,
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
    return rows


def metric_rows(summary: dict, labels: dict) -> list[dict]:
    """One row per estimator with its family metrics."""
    return [{**labels, "estimator": est, **m} for est, m in summary["metrics"].items() if m]


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def aggregate(rows: Sequence[dict], keys: Sequence[str], n_boot: int, level: float) -> dict[tuple, dict]:
    """{group key: {metric: mean_ci over the runs (seeds) of that group}} for the table metrics."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return {
        g: {m: mean_ci([r.get(m, np.nan) for r in rs], n_boot, level, seed=0) for m, _, _ in TABLE_METRICS}
        for g, rs in groups.items()
    }


def fmt(ci: dict) -> str:
    if not np.isfinite(ci["mean"]):
        return f"NaN ({ci['failures']} failed)"
    text = f"{ci['mean']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}]"
    return text + (f" ({ci['failures']} NaN)" if ci["failures"] else "")


def markdown_table(agg: dict[tuple, dict], row_key: int, col_key: int | None, metric: str) -> str:
    """Rows by group element `row_key`, columns by element `col_key` (one column when None)."""
    rows = list(dict.fromkeys(g[row_key] for g in agg))
    cols = list(dict.fromkeys(g[col_key] for g in agg)) if col_key is not None else [None]
    head = "| estimator | " + " | ".join(str(c) if c is not None else metric for c in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    for r in rows:
        cells = []
        for c in cols:
            match = [v for g, v in agg.items() if g[row_key] == r and (col_key is None or g[col_key] == c)]
            cells.append(fmt(match[0][metric]) if match else "")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def metrics_table(agg: dict[tuple, dict], label: str = "estimator") -> str:
    """Rows by the first group element, one column per table metric."""
    lines = [
        f"| {label} | " + " | ".join(f"{title} ({sense.split()[0]})" for _, title, sense in TABLE_METRICS) + " |",
        "|---" * (len(TABLE_METRICS) + 1) + "|",
    ]
    for g, v in agg.items():
        lines.append(f"| {g[0]} | " + " | ".join(fmt(v[m]) for m, _, _ in TABLE_METRICS) + " |")
    return "\n".join(lines)


def plot_metric(agg: dict[tuple, dict], row_key: int, col_key: int | None, metric: str, path: Path) -> None:
    """Grouped bars of a metric's mean with its CI: one group per row, one bar per column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(dict.fromkeys(g[row_key] for g in agg))
    cols = list(dict.fromkeys(g[col_key] for g in agg)) if col_key is not None else [None]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) * max(1, len(cols))), 4))
    width = 0.8 / len(cols)
    for j, c in enumerate(cols):
        mean, lo, hi = [], [], []
        for r in rows:
            v = next(
                (v[metric] for g, v in agg.items() if g[row_key] == r and (col_key is None or g[col_key] == c)), None
            )
            m = v["mean"] if v else np.nan
            mean.append(m)
            # clipped at 0: where every seed agrees the interval's ends differ from the mean by rounding
            lo.append(max(m - v["low"], 0.0) if v and np.isfinite(m) else 0)
            hi.append(max(v["high"] - m, 0.0) if v and np.isfinite(m) else 0)
        x = np.arange(len(rows)) + j * width
        ax.bar(x, mean, width, yerr=[lo, hi], capsize=3, label=str(c) if c is not None else None)
    ax.set_xticks(np.arange(len(rows)) + 0.4 - width / 2, [str(r) for r in rows], rotation=30, ha="right")
    ax.set_ylabel(metric)
    ax.axhline(0, color="black", lw=0.5)
    if col_key is not None:
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


OVERLAP_METRICS = (  # (column, the estimator whose weights it reads, title)
    ("ess_is", "is", "median IS ESS, exact behaviour (share of episodes)"),
    ("ess_is_est", "is_est", "median IS ESS, estimated behaviour (share of episodes)"),
)


def overlap_row(summary: dict, labels: dict) -> dict | None:
    """The log's overlap with a run's family: the median over its policies of the IS weights' effective
    sample size as a share of the logged episodes (exact and estimated behaviour). None without baselines."""
    rows = [p for p in summary["policies"] if p.get("n_episodes")]
    if not rows:
        return None
    out = dict(labels)
    for column, estimator, _ in OVERLAP_METRICS:
        shares = [p["ess"][estimator] / p["n_episodes"] for p in rows if p.get("ess", {}).get(estimator) is not None]
        out[column] = float(np.median(shares)) if shares else None
    return out


def fidelity_rows(metrics: dict, label: str, seed, controls: bool = True, scope: str | None = None) -> list[dict]:
    """Rows of one fit's fidelity metrics (`metrics.json`'s `metrics`): the learned model under `label`, and
    (`controls`) the controls' state accuracies on the same replays, named with `scope` (a benchmark's cell)
    when given. Empty when the fit measured none."""
    if not any(k.startswith("fidelity/") for k in metrics):
        return []
    rows = [
        {"row": f"learned ({label})", "seed": seed} | {k: metrics.get(f"fidelity/{k}") for k, _ in FIDELITY_METRICS}
    ]
    for control in FIDELITY_CONTROLS if controls else ():
        accs = {k: metrics.get(f"fidelity/{control}_{k}") for k, _ in FIDELITY_METRICS if k.startswith("state_acc")}
        if all(v is None for v in accs.values()):
            continue
        rows.append({"row": f"{control} ({scope})" if scope else control, "seed": seed} | accs)
    return rows


def mean_ci_table(
    rows: list[dict], key: str, columns: Sequence[tuple], n_boot: int, level: float, label: str | None = None
) -> str:
    """One line per value of `rows[key]` (first-seen order), one column per `(field, ..., title)` of `columns`:
    the field's mean over those rows (seeds) with its CI; a None field is a failure, a column with no value
    left blank. The first header cell is `label` (default: `key`)."""
    lines = [
        f"| {label or key} | " + " | ".join(c[-1] for c in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for name in dict.fromkeys(r[key] for r in rows):
        cells = []
        for field, *_ in columns:
            values = [r.get(field) for r in rows if r[key] == name]
            known = [np.nan if v is None else v for v in values]
            cells.append(fmt(mean_ci(known, n_boot, level, seed=0)) if any(v is not None for v in values) else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_table(timings: list[dict], label: str = "cell") -> str:
    """One row per run (its `cell` and `seed`), one column per timed stage, then the run's wall time (`wall`,
    where its grid record has one)."""
    keys = list(dict.fromkeys(k for t in timings for k in t if k not in (label, "seed", WALL)))
    keys += [WALL] if any(WALL in t for t in timings) else []
    lines = [f"| {label} | seed | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
    for t in timings:
        cells = ("not recorded" if t.get(k, "") is None else str(t.get(k, "")) for k in keys)
        lines.append(f"| {t[label]} | {t['seed']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


WALL = "wall"  # a run's wall seconds, from its grid record (the last time it ran: a resumed run, its last part)


def wall_line(timings: list[dict]) -> str:
    """The finished runs' wall time in all, the sum of their `wall` seconds (the grid runs them one at a time
    unless it is given workers), or '' where no run recorded one."""
    walls = [t[WALL] for t in timings if t.get(WALL) is not None]
    if not walls:
        return ""
    return (
        f"The {len(walls)} finished runs took {sum(walls) / 3600:.1f} h of wall time in all ({sum(walls):.0f} s, "
        "the sum of each run's `wall`: one run after another, on this machine)."
    )


BUDGETS = [  # (config key, column title) of what a cell spends and how long its episodes are
    ("env.name", "environment"),
    ("env.max_steps", "episode steps"),
    ("collect.n_episodes", "logged episodes"),
    ("ground_truth.n_episodes", "ground-truth episodes a policy"),
    ("fit.max_steps", "fit steps"),
    ("fit.encoder_steps", "of them with the encoder"),
    ("evaluate.simulate.n_rollouts", "rollouts a policy"),
    ("evaluate.calibration", "calibration"),
]


def budget_row(cell: str, cfg: DictConfig, walls: list[float], command: str | None) -> dict:
    """A cell's budgets (`BUDGETS`, read from one of its runs' resolved config), its behaviour agents, its
    mean wall time a seed and the command that runs it alone."""
    row = {"cell": cell, **{title: OmegaConf.select(cfg, key) for key, title in BUDGETS}}
    behaviour = OmegaConf.select(cfg, "collect.behaviour") or []
    row["behaviour agents"] = ", ".join(str(OmegaConf.select(b, "policy.name")) for b in behaviour)
    row["wall a seed (min)"] = f"{np.mean(walls) / 60:.0f}" if walls else ""
    row["run alone"] = f"`{command}`" if command else ""
    return row


def budget_table(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|---" * len(keys) + "|"]
    lines += ["| " + " | ".join("" if r[k] is None else str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def estimates_table(rows: list[dict]) -> str:
    """Policies as rows; J with its standard error, then ADWM per variant and each baseline."""

    def column(r: dict) -> str:
        adwm = is_adwm(r["estimator"])
        return f"{r['estimator']} ({r['variant']})" if adwm and "variant" in r else r["estimator"]

    cols = list(dict.fromkeys(column(r) for r in rows))
    table: dict[str, dict] = {}
    for r in rows:
        col = column(r)
        t = table.setdefault(r["policy"], {"J": f"{r['J_true']:.3f} +- {r['J_true_se']:.3f}"})
        t[col] = "NaN" if r["J_hat"] is None or not np.isfinite(r["J_hat"]) else f"{r['J_hat']:.3f}"
    lines = ["| policy | J | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    for policy, t in table.items():
        lines.append(f"| {policy} | {t['J']} | " + " | ".join(t.get(c, "") for c in cols) + " |")
    return "\n".join(lines)
