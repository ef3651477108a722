"""`adwm benchmark`: every cell (environment x behaviour logs x policy family) and seed, with ground truth,
ADWM and every baseline; then a CSV of every estimate, per-seed metrics, a markdown table in the paper's
shape (rows: estimators; columns: cells; mean and bootstrap CI over seeds) and PNG plots.

Each (cell, seed) is the main job (`quickstart`) under `<benchmark.out>/<cell>/seed<k>`, so a killed
benchmark resumes where it stopped: every stage skips what it already finished.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from adwm.atomic import atomic_write_json, atomic_write_text
from adwm.report import (
    TABLE_METRICS,
    aggregate,
    estimate_rows,
    markdown_table,
    metric_rows,
    plot_metric,
    plot_scatter,
    timing_table,
    write_csv,
)


@dataclass
class CellConfig:
    name: str = "builtin"  # column name in the tables; also the cell's folder
    experiment: str | None = None  # the experiment file this cell composes from (None: the benchmark's own)
    overrides: list[str] = field(default_factory=list)  # further deltas of this cell: group=choice or a.b=value


@dataclass
class BenchmarkConfig:
    cells: list[CellConfig] = field(default_factory=lambda: [CellConfig()])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    out: str = "runs/benchmark/${experiment}"
    ci_resamples: int = 2000  # bootstrap resamples of each metric's mean over seeds (unit: seed)
    ci_level: float = 0.95


def cell_overrides(cfg: DictConfig, cell: CellConfig, seed: int, cli: list[str]) -> list[str]:
    """The main job's overrides for one (cell, seed): the cell's experiment and deltas, then the command
    line's (they win), then the seed and the cell's own folder."""
    experiment = cell.experiment or cfg.experiment
    rest = [o for o in cli if not o.startswith(("experiment=", "benchmark."))]
    root = Path(cfg.benchmark.out) / cell.name / f"seed{seed}"
    return [f"experiment={experiment}", *cell.overrides, *rest, f"seed={seed}", f"run.root={root}"]


def benchmark(cfg: DictConfig, cli: list[str]) -> Path:
    """Run every cell and seed; returns the path of the markdown table."""
    from adwm.config import load_config
    from adwm.quickstart import quickstart

    bcfg: BenchmarkConfig = OmegaConf.to_object(cfg.benchmark)
    if not bcfg.cells or not bcfg.seeds:
        raise ValueError("benchmark.cells and benchmark.seeds: expected at least one of each")
    names = [c.name for c in bcfg.cells]
    if len(set(names)) != len(names):
        raise ValueError(f"benchmark.cells: names must be unique, got {names}")
    out = Path(bcfg.out)
    runs = [(c, s) for c in bcfg.cells for s in bcfg.seeds]
    configs = [load_config(cell_overrides(cfg, c, s, cli), "quickstart") for c, s in runs]  # fail fast on bad cells
    est_rows, met_rows, timings = [], [], []
    for k, ((cell, seed), run_cfg) in enumerate(zip(runs, configs)):
        print(f"benchmark [{k + 1}/{len(runs)}] cell {cell.name} seed {seed}", file=sys.stderr)
        start = time.time()
        summary = json.loads(quickstart(run_cfg).read_text())
        labels = {"cell": cell.name, "seed": seed}
        est_rows += estimate_rows(summary, labels)
        met_rows += metric_rows(summary, labels)
        timings.append({**labels, **summary.get("timings_s", {}), "wall_s": round(time.time() - start, 1)})
    return write_benchmark(out, est_rows, met_rows, timings, bcfg)


def write_benchmark(out: Path, est_rows: list[dict], met_rows: list[dict], timings: list[dict], bcfg) -> Path:
    write_csv(out / "estimates.csv", est_rows)
    write_csv(out / "metrics.csv", met_rows)
    write_csv(out / "timings.csv", timings)
    agg = aggregate(met_rows, ("estimator", "cell"), bcfg.ci_resamples, bcfg.ci_level)
    atomic_write_json(out / "aggregate.json", [{"estimator": e, "cell": c, **v} for (e, c), v in agg.items()])
    seeds = sorted({r["seed"] for r in met_rows})
    parts = [
        "# Benchmark results",
        "",
        f"Mean over seeds {seeds} with a {bcfg.ci_level:.0%} percentile bootstrap CI ({bcfg.ci_resamples} "
        "resamples; the resampling unit is the seed). A NaN metric (constant or undefined estimates) is a "
        "failure and is counted.",
    ]
    for metric, title, sense in TABLE_METRICS:
        parts += ["", f"## {title} ({sense})", "", markdown_table(agg, 0, 1, metric)]
        plot_metric(agg, 0, 1, metric, out / f"{metric}.png")
    cells = list(dict.fromkeys(r["cell"] for r in est_rows))
    for cell in cells:
        plot_scatter([r for r in est_rows if r["cell"] == cell], out / f"scatter_{cell}.png", f"J vs J_hat: {cell}")
    parts += ["", "## Wall time per run (s)", "", timing_table(timings)]
    table = out / "table.md"
    atomic_write_text(table, "\n".join(parts) + "\n")
    return table
