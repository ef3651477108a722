"""The world model's budget curve: accuracy and fidelity against fit steps and against the log's size.

    .venv/bin/adwm grid experiments/scaling.yaml                       # builtin, seeds 3 and 4
    .venv/bin/adwm grid experiments/scaling_textworld.yaml             # TextWorld cooking, seed 3
    .venv/bin/python benchmarks/scaling.py runs/grid/scaling runs/grid/scaling_textworld
    .venv/bin/python benchmarks/scaling.py --keep runs/grid/scaling_textworld  # the other grids as recorded

Reads every finished run of the given grid folders (its `quickstart/summary.json`: the resolved config,
the family metrics of uncalibrated ADWM, the fit's stage time; and its world model's `metrics.json`: the
fidelity replays) and writes, per grid, the mean over seeds of each budget: optimiser steps, episodes in
the log, fit seconds, Spearman, nRMSE, regret@1, state accuracy after 1 and 10 replayed steps and the
return correlation. Outputs: docs/results/scaling.md, docs/results/scaling.png (one row of panels per
grid: against fit steps at the full log, against episodes at the default steps) and
benchmarks/results/scaling.json. With --keep, the grids that scaling.json holds and the command does not
name keep the points recorded there (their runs may live on another machine), and the table says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from adwm.evaluation.plots import save_figure
from adwm.runtime.atomic import atomic_write_json, atomic_write_text, read_json
from adwm.runtime.provenance import benchmark_stamp, load_run_config

COLUMNS = (
    ("spearman", "Spearman"),
    ("nrmse", "nRMSE"),
    ("regret_at_1", "regret@1"),
    ("state_acc@1", "state acc @1"),
    ("state_acc@10", "state acc @10"),
    ("return_corr", "return corr"),
)


def run_point(run: Path) -> dict | None:
    """One finished run's budget and figures; None when the run has not finished."""
    summary_path = run / "quickstart" / "summary.json"
    if not (run / "grid_run.json").is_file() or not summary_path.is_file():
        return None
    summary = read_json(summary_path)
    cfg = load_run_config(summary["config"])  # the summary names the run's saved config
    metrics = summary["metrics"].get("adwm_sim") or summary["metrics"]["adwm"]  # uncalibrated
    fit = read_json(Path(cfg["run"]["fit"]) / "metrics.json")
    episodes = cfg["data"]["max_episodes"]
    with open(summary["behaviour_log"]) as f:
        logged = sum(1 for line in f if line.strip())
    point = {
        "run": run.name,
        "seed": summary["seed"],
        "steps": fit["global_step"],
        "max_steps": cfg["fit"]["max_steps"],
        "episodes": min(episodes, logged) if episodes else logged,
        "fit_s": fit["seconds"],
        "commit": summary.get("commit"),
    }
    point |= {k: metrics.get(k) for k, _ in COLUMNS if k in metrics}
    point |= {k: fit["metrics"].get(f"fidelity/{k}") for k, _ in COLUMNS if f"fidelity/{k}" in fit["metrics"]}
    return point


def budgets(points: list[dict]) -> list[dict]:
    """Mean over seeds per (steps budget, episodes), sorted by episodes then steps."""
    groups: dict[tuple, list[dict]] = {}
    for p in points:
        groups.setdefault((p["max_steps"], p["episodes"]), []).append(p)
    rows = []
    for (steps, episodes), ps in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        row = {"max_steps": steps, "episodes": episodes, "seeds": sorted(p["seed"] for p in ps)}
        for key in ("fit_s", *(k for k, _ in COLUMNS)):
            values = [p[key] for p in ps if p.get(key) is not None and np.isfinite(p[key])]
            row[key] = float(np.mean(values)) if values else None
        rows.append(row)
    return rows


def curves(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The steps curve (the full log) and the log-size curve (the default steps of the grid: the budget the
    most rows share with the full log)."""
    full = max(r["episodes"] for r in rows)
    by_steps = sorted((r for r in rows if r["episodes"] == full), key=lambda r: r["max_steps"])
    counts = {s: sum(r["max_steps"] == s for r in rows) for s in {r["max_steps"] for r in rows}}
    default = max(counts, key=lambda s: (counts[s], s))
    by_size = sorted((r for r in rows if r["max_steps"] == default), key=lambda r: r["episodes"])
    return by_steps, by_size


def _cell(value, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    head = "| fit steps | episodes | seeds | fit (s) | " + " | ".join(t for _, t in COLUMNS) + " |"
    lines = [head, "|---" * (len(COLUMNS) + 4) + "|"]
    for r in rows:
        cells = " | ".join(_cell(r[k], 3 if k == "nrmse" else 2) for k, _ in COLUMNS)
        seeds = ", ".join(str(s) for s in r["seeds"])
        lines.append(f"| {r['max_steps']} | {r['episodes']} | {seeds} | {_cell(r['fit_s'], 0)} | {cells} |")
    return "\n".join(lines)


def plot(grids: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(grids), 2, figsize=(10, 3.6 * len(grids)), squeeze=False)
    for (name, rows), (ax_steps, ax_size) in zip(grids.items(), axes):
        by_steps, by_size = curves(rows)
        for ax, points, x, label in (
            (ax_steps, by_steps, "max_steps", "fit steps"),
            (ax_size, by_size, "episodes", "episodes in the log"),
        ):
            for key, title in (("spearman", "Spearman"), ("nrmse", "nRMSE"), ("state_acc@10", "state acc @10")):
                xs = [p[x] for p in points if p.get(key) is not None]
                ys = [p[key] for p in points if p.get(key) is not None]
                ax.plot(xs, ys, marker="o", label=title)
            ax.set_xscale("log", base=2)
            ticks = sorted({p[x] for p in points})
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
            ax.set_xlabel(label)
            ax.set_title(f"{name}: against {label}")
            ax.set_ylim(-0.1, 1.05)
            ax.grid(alpha=0.3)
        ax_steps.legend()
    fig.tight_layout()
    save_figure(fig, path)


def recorded_points(out_json: Path, names: set[str]) -> dict[str, list[dict]]:
    """The points an earlier run of this script recorded in `out_json` for the grids not in `names`."""
    if not out_json.is_file():
        raise SystemExit(f"benchmarks/scaling.py --keep: {out_json} does not exist (nothing recorded to keep)")
    recorded = read_json(out_json)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("runs"), dict):
        raise SystemExit(f"benchmarks/scaling.py --keep: {out_json} has no 'runs' object of recorded points")
    return {name: points for name, points in recorded["runs"].items() if name not in names}


def main(folders: list[Path], out_md: Path, out_png: Path, out_json: Path, keep: bool = False) -> Path:
    points_by_grid = recorded_points(out_json, {f.name for f in folders}) if keep else {}
    kept = list(points_by_grid)
    for folder in folders:
        points = [p for run in sorted((folder / "runs").glob("*")) if (p := run_point(run))]
        if not points:
            raise SystemExit(f"benchmarks/scaling.py: no finished run under {folder / 'runs'}")
        points_by_grid[folder.name] = points
    grids = {name: budgets(points) for name, points in points_by_grid.items()}
    command = " ".join(["python benchmarks/scaling.py", *(["--keep"] if keep else []), *map(str, folders)])
    parts = [
        "# The world model's budget curve",
        "",
        f"Generated by `{command}` from the grids `experiments/{{{','.join(grids)}}}.yaml`. ADWM is "
        "uncalibrated in every row; each row is the mean over its seeds (held out: the defaults were tuned on "
        "seeds 0-2). Fidelity columns come from `adwm fit`'s replays of held-out logged episodes (a smaller log "
        "holds out fewer of them). The plot: docs/results/scaling.png.",
    ]
    for name, rows in grids.items():
        commits = sorted({p["commit"] for p in points_by_grid[name] if p.get("commit")})
        made = f"Runs made at commit {', '.join(commits) or 'unknown'}"
        if name in kept:
            made += f"; the points as recorded in {out_json} by an earlier run of this script (--keep)"
        parts += ["", f"## {name}", "", made + ".", "", table(rows)]
    plot(grids, out_png)
    atomic_write_text(out_md, "\n".join(parts) + "\n")
    atomic_write_json(out_json, {"grids": grids, "runs": points_by_grid, "provenance": benchmark_stamp()})
    return out_md


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "grids", nargs="+", type=Path, metavar="GRID_FOLDER", help="a grid's folder, e.g. runs/grid/scaling"
    )
    parser.add_argument("--keep", action="store_true", help="keep the recorded points of the grids not named")
    args = parser.parse_args()
    print(
        main(
            args.grids,
            Path("docs/results/scaling.md"),
            Path("docs/results/scaling.png"),
            Path("benchmarks/results/scaling.json"),
            keep=args.keep,
        )
    )
