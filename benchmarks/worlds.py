"""The default world against its ablations, the learned model alone, the oracle and the log's controls, on
finished main jobs of several seeds.

    .venv/bin/python benchmarks/worlds.py runs/v3 runs/v4 runs/v5 runs/v6 runs/v7 [--out docs/results/worlds.md]

Each argument is the run root of a finished `adwm quickstart run.root=...` (`make demo ARGS="seed=S
run.root=runs/vS"`). For every row of `ROWS` it runs `adwm evaluate` on the run's log, agents, world model
and family with the row's overrides (the run's seed and rollout budget; estimates kept in
`<root>/worlds/<row>.json`, reused by a rerun with the same settings), then writes a markdown table: per row
the mean over the runs of Spearman, nRMSE and regret@1 against each run's ground truth, with a 95%
percentile bootstrap CI over the runs (the resampling unit is the seed), each row's nRMSE against the
default's paired by seed, the per-seed Spearman / nRMSE and the simulation's seconds per policy, beside the
run's own baselines (FQE, WDR). The default world is estimated with the defaults: calibrated (`adwm`, which
simulates the behaviour agents) and uncalibrated (`adwm_sim`, its simulated value alone); every other row is
uncalibrated. The figures are also written as JSON beside the table. `--no-run` tabulates the rows'
estimates files as an earlier run left them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from adwm.evaluation.bootstrap import mean_interval
from adwm.evaluation.metrics import family_metrics
from adwm.runtime.atomic import atomic_write_json, atomic_write_text

UNCALIBRATED = ["evaluate.calibration=none"]
# row -> (what it is, `adwm evaluate` overrides); `default` is the one calibrated row
ROWS: dict[str, tuple[str, list[str]]] = {
    "default": ("the default: the learned model picks among the analogy world's proposals", []),
    "no_action_guidance": ("the learned model's sample ignores the action (guidance.omega=0)", ["guidance.omega=0"]),
    "heads_rewards": (
        "the learned model's heads pay and end each step, not the log",
        ["evaluate.guided_analogy.rewards=heads"],
    ),
    "analogy": ("no learned model: the proposal drawn by the log's frequencies", ["evaluate.world=analogy"]),
    "diffusion": (
        "the learned model alone (its sample snapped to a logged state)",
        ["evaluate.world=diffusion"],
    ),
    "oracle": ("the real environment from the same logged starts", ["evaluate.world=oracle"]),
    "nearest": ("the logged successor of the nearest logged state and action", ["evaluate.world=nearest"]),
    "stay": ("the state never changes", ["evaluate.world=stay"]),
}
METRICS = ("spearman", "nrmse", "regret_at_1")
# the run's own baselines (summary.json), beside the worlds: what they estimated from the same log
BASELINES = {
    "fqe": "baseline: fitted Q evaluation",
    "wdr": "baseline: weighted doubly robust, exact behaviour probabilities",
    "wdr_est": "baseline: weighted doubly robust, estimated behaviour probabilities",
}


def estimate(root: Path, row: str, summary: dict, run: bool = True) -> dict:
    """`adwm evaluate` of `row` on the run at `root` -> its estimates file's contents (`run=False`: the file
    as an earlier run left it)."""
    path = root / "worlds" / f"{row}.json"
    if not run:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no estimates of row '{row}' (run without --no-run first)")
        return json.loads(path.read_text())
    overrides = ROWS[row][1] + ([] if row == "default" else UNCALIBRATED)
    args = [f"seed={summary['seed']}", f"run.root={root}", f"evaluate.out={path}", *summary.get("overrides", [])]
    subprocess.run(
        [sys.executable, "-m", "adwm.cli", "evaluate", *args, *overrides], check=True, stdout=subprocess.DEVNULL
    )
    return json.loads(path.read_text())


def seed_figures(summary: dict, results: dict[str, dict]) -> dict[str, dict]:
    """Per estimator (`adwm` and `adwm_sim` of the default row, then each other row, then the run's baselines)
    of one run: its metrics against the run's ground truth, its estimates and its mean seconds per policy
    (a baseline's: None, its time is not the simulation's)."""
    names = [p["name"] for p in summary["policies"]]
    truth = [p["J_true"] for p in summary["policies"]]
    out = {}
    for row, res in results.items():
        est = res["estimates"]
        keys = {"adwm": "J_hat", "adwm_sim": "J_hat_sim"} if row == "default" else {row: "J_hat"}
        for label, key in keys.items():
            values = [est[n][key] for n in names]
            out[label] = family_metrics(truth, values) | {
                "estimates": dict(zip(names, values)),
                "seconds_per_policy": float(np.mean([est[n]["seconds"] for n in names])),
            }
    for name in BASELINES:
        values = [p["estimates"][name] for p in summary["policies"]]
        out[name] = family_metrics(truth, values) | {"estimates": dict(zip(names, values)), "seconds_per_policy": None}
    return out


def table(per_seed: dict[int, dict[str, dict]], commit: str, command: str) -> tuple[str, dict]:
    """The markdown table and its figures: per estimator, the mean over seeds with its bootstrap CI."""
    seeds = sorted(per_seed)
    labels = list(per_seed[seeds[0]])
    figures: dict[str, dict] = {}
    for label in labels:
        f = {"per_seed": {s: {m: per_seed[s][label][m] for m in METRICS} for s in seeds}}
        for m in METRICS:
            v = [per_seed[s][label][m] for s in seeds]
            f[m] = {"mean": float(np.mean(v)), "ci": list(mean_interval(v, 2000, 0.95, 0)), "min": float(np.min(v))}
        seconds = [per_seed[s][label]["seconds_per_policy"] for s in seeds]
        f["seconds_per_policy"] = None if None in seconds else float(np.mean(seconds))
        if "adwm_sim" in labels and label != "adwm_sim":  # paired by seed: each row against the default's
            d = [per_seed[s][label]["nrmse"] - per_seed[s]["adwm_sim"]["nrmse"] for s in seeds]
            f["nrmse_minus_default"] = {"mean": float(np.mean(d)), "ci": list(mean_interval(d, 2000, 0.95, 0))}
        figures[label] = f
    held = [s for s in seeds if s > 2]
    lines = [
        "# The default world against its ablations, the learned model alone, the oracle and the log's controls",
        "",
        f"Generated by `{command}` at commit {commit}, on the finished main jobs of seeds {seeds} (their agents, "
        f"logs, world models and ground truth). "
        + (f"Seeds {held} are held out: the defaults were tuned on seeds 0-2. " if held else "")
        + "Mean over the seeds with a 95% percentile bootstrap CI (the resampling unit is the seed). `adwm` is "
        "the default calibrated (it simulates the behaviour agents, a privilege no baseline has); every other "
        "row is uncalibrated, `adwm_sim` the default's simulated value alone. *nRMSE - default*: the row's nRMSE "
        "minus `adwm_sim`'s, paired by seed (above 0: worse than the default), with its CI. Per seed: Spearman / "
        "nRMSE. Seconds: the simulation's, per policy (96 rollouts), on this machine.",
        "",
        "| estimator | what it is | Spearman (higher) | nRMSE (lower) | nRMSE - default | regret@1 (lower) | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | s / policy |",
        "|---|---|---|---|---|---|" + "---|" * len(seeds) + "---|",
    ]
    for label in labels:
        f = figures[label]
        what = (
            "the default, calibrated"
            if label == "adwm"
            else BASELINES[label]
            if label in BASELINES
            else ROWS["default" if label == "adwm_sim" else label][0]
        )
        cells = [f"{f[m]['mean']:.2f} [{f[m]['ci'][0]:.2f}, {f[m]['ci'][1]:.2f}]" for m in METRICS]
        cells[1] = f"{f['nrmse']['mean']:.3f} [{f['nrmse']['ci'][0]:.3f}, {f['nrmse']['ci'][1]:.3f}]"
        d = f.get("nrmse_minus_default")
        cells.insert(2, "" if d is None else f"{d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")
        per = [f"{f['per_seed'][s]['spearman']:.2f} / {f['per_seed'][s]['nrmse']:.3f}" for s in seeds]
        seconds = "" if f["seconds_per_policy"] is None else f"{f['seconds_per_policy']:.1f}"
        lines.append(f"| {label} | {what} | " + " | ".join(cells + per) + f" | {seconds} |")
    return "\n".join(lines) + "\n", figures


def main(roots: list[Path], out: Path, run: bool = True) -> Path:
    per_seed = {}
    for root in roots:
        summary = json.loads((root / "quickstart" / "summary.json").read_text())
        if summary["seed"] in per_seed:
            raise ValueError(f"{root}: seed {summary['seed']} is given twice")
        per_seed[summary["seed"]] = seed_figures(summary, {row: estimate(root, row, summary, run) for row in ROWS})
    git = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    commit = git.stdout.strip() or "unknown"
    command = "python benchmarks/worlds.py " + " ".join(str(r) for r in roots)
    if not run:  # the estimates were made earlier, perhaps by other code: the table says so
        commit += " (`--no-run`: from the estimates files under each run's `worlds/`, made earlier)"
    text, figures = table(per_seed, commit, command)
    atomic_write_text(out, text)
    atomic_write_json(out.with_suffix(".json"), {"command": command, "commit": commit, "figures": figures})
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="run roots of finished main jobs, one per seed")
    parser.add_argument("--out", type=Path, default=Path("docs/results/worlds.md"))
    parser.add_argument("--no-run", action="store_true", help="tabulate the rows' estimates files as they are")
    args = parser.parse_args()
    print(main(args.roots, args.out, not args.no_run))
