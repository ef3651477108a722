"""`adwm benchmark`: every cell (environment x behaviour logs x policy family) and seed, with ground truth,
ADWM and every baseline, as one grid whose axis is the cell (adwm.sweeps.grid): each (cell, seed) is the
main job in its own folder under `<benchmark.out>/runs`, resumed where a killed benchmark stopped, and the
report has the paper's shape (rows: estimators; columns: cells; mean and bootstrap CI over seeds).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from adwm.config import BenchmarkConfig, load_config
from adwm.sweeps.grid import GridSpec, run_grid
from adwm.sweeps.tables import CELL_AXIS


def benchmark_grid(cfg: DictConfig, cli: list[str]) -> GridSpec:
    """The grid of `cfg.benchmark`: axis `cell`, each value the cell's experiment and deltas followed by the
    command line's other overrides (they win over the cell's); `benchmark.only` keeps the cells it names."""
    bcfg: BenchmarkConfig = OmegaConf.to_object(cfg.benchmark)
    if not bcfg.cells or not bcfg.seeds:
        raise ValueError("benchmark.cells and benchmark.seeds: expected at least one of each")
    names = [c.name for c in bcfg.cells if not bcfg.only or c.name in bcfg.only]
    if len(set(names)) != len(names):
        raise ValueError(f"benchmark.cells: names must be unique, got {names}")
    rest = [o for o in cli if not o.startswith(("experiment=", "benchmark."))]
    cells = {
        c.name: [f"experiment={c.experiment or cfg.experiment}", *c.overrides, *rest]
        for c in bcfg.cells
        if c.name in names
    }
    for overrides in cells.values():  # fail fast on a bad cell, before any run starts
        load_config([*overrides, "seed=0"], "quickstart")
    shown = [o for o in cli if not o.startswith(("benchmark.report_only=", "benchmark.only="))]
    return GridSpec(
        name=cfg.experiment,
        axes={CELL_AXIS: cells},
        seeds=list(bcfg.seeds),
        out=str(Path(bcfg.out)),
        report=bcfg.report,
        ci_resamples=bcfg.ci_resamples,
        ci_level=bcfg.ci_level,
        title="Benchmark results",
        command=" ".join(["adwm benchmark", *(o for o in cli if not o.startswith("benchmark.report_only="))]),
        note=_part_of(cfg, cli, names, list(bcfg.seeds)),
        alone={n: " ".join(["adwm benchmark", *shown, f"benchmark.only=[{n}]"]) for n in names},
    )


def _part_of(cfg: DictConfig, cli: list[str], names: list[str], seeds: list[int]) -> str | None:
    """Where the command line picks other cells or seeds than its experiment's: which part of the
    experiment's benchmark the table holds (None: all of it, or an experiment without a benchmark)."""
    chosen = [o for o in cli if o.startswith(("benchmark.cells=", "benchmark.seeds=", "benchmark.only="))]
    if not chosen:
        return None
    rest = [o for o in cli if o not in chosen]
    whole: BenchmarkConfig = OmegaConf.to_object(load_config(rest, "benchmark").benchmark)
    every = [c.name for c in whole.cells]
    missing = [n for n in every if n not in names]
    if not missing and set(whole.seeds) <= set(seeds):
        return None
    command = " ".join(["adwm benchmark", *(o for o in rest if not o.startswith("benchmark."))])
    said = f"Part of `{command}`: cells {names} of {every}"
    said += f" (not in this table: {missing})" if missing else ""
    return said + f", seeds {seeds} of {list(whole.seeds)}."


def benchmark(cfg: DictConfig, cli: list[str]) -> Path:
    """Run every cell and seed (`benchmark.report_only`: none, the runs finished so far aggregated); returns
    the path of the markdown table."""
    return run_grid(benchmark_grid(cfg, cli), report_only=cfg.benchmark.report_only)
