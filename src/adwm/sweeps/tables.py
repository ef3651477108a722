"""The report of a grid: CSVs of every estimate, metric and stage time, a markdown table of the family
metrics (mean and bootstrap CI over seeds) and PNG plots. One writer for every grid; a grid with a `cell`
axis (`adwm benchmark`) gets the paper's shape, estimators as rows and cells as columns, and any other
grid one ADWM row per variant with each baseline once.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import OmegaConf

from adwm.evaluation.plots import plot_scatter
from adwm.runtime.atomic import atomic_write_json, atomic_write_text, read_json
from adwm.runtime.provenance import GENERATED, changed_between
from adwm.sweeps.report import (
    ESTIMATOR_NOTE,
    FIDELITY_METRICS,
    OVERLAP_METRICS,
    TABLE_METRICS,
    WALL,
    aggregate,
    budget_row,
    budget_table,
    estimate_rows,
    estimates_table,
    estimator_rank,
    fidelity_rows,
    is_adwm,
    markdown_table,
    mean_ci_table,
    metric_rows,
    metrics_table,
    overlap_row,
    plot_metric,
    timing_table,
    wall_line,
    write_csv,
)

CELL_AXIS = "cell"


def _rows(spec, runs: list, finished: list[bool]) -> tuple[list, list, list, list, str | None, list]:
    """Estimate, metric, timing and overlap rows of the finished runs, the first variant (whose baselines
    the variant table shows) and each run's commit (None: not run from a git checkout)."""
    by_cell = CELL_AXIS in spec.axes
    est_rows, met_rows, timings, overlap, first, commits = [], [], [], [], None, []
    for r, done in zip(runs, finished):
        path = r.root / "quickstart" / "summary.json"
        if not done or not path.is_file():
            continue
        summary = read_json(path)
        commits.append(summary.get("commit"))
        combo = "/".join(str(v) for k, v in r.labels.items() if k != "seed") or "default"
        first = first or combo
        key = CELL_AXIS if by_cell else "variant"
        labels = {key: combo, "seed": r.labels["seed"]}
        for row in metric_rows(summary, labels):
            if by_cell:
                met_rows.append(row)
            elif is_adwm(row["estimator"]):  # adwm and, when calibrated, adwm_sim
                met_rows.append({**row, "row": f"{row['estimator']} ({combo})"})
            elif combo == first:
                met_rows.append({**row, "row": row["estimator"]})
        est_rows += estimate_rows(summary, labels)
        if by_cell or combo == first:  # the log's overlap with the family: one row per cell and seed
            overlap += [row] if (row := overlap_row(summary, labels)) else []
        stages = summary.get("stage_seconds", summary.get("timings_s", {}))
        record = r.root / "grid_run.json"
        wall = read_json(record).get("wall_s") if record.is_file() else None
        timings.append({key: combo, "seed": r.labels["seed"], **stages, **({WALL: wall} if wall is not None else {})})
    return est_rows, met_rows, timings, overlap, first, commits


def commits_line(commits: list[str | None], root: str | Path | None = None) -> str:
    """What code made a table's runs, from each finished run's commit (None: not run from a git checkout):
    one commit, or each with its count and whether the code changed between them: git (in the checkout at
    `root`, the package's by default) compares the commits outside the generated tables and figures; a dirty
    or unknown commit, or a comparison git cannot make, counts as changed code."""
    counts: dict[str, int] = {}
    for c in commits:
        name = f"`{c[:12]}{'-dirty' if c.endswith('-dirty') else ''}`" if c else "an unknown commit"
        counts[name] = counts.get(name, 0) + 1
    if len(counts) == 1:
        return f"Every run was made at commit {next(iter(counts))}."
    listed = ", ".join(f"{name} ({n} run{'s' if n > 1 else ''})" for name, n in counts.items())
    shas = sorted({c for c in commits if c})
    if len(shas) == len(counts) and not any(c.endswith("-dirty") for c in shas):
        changed = [changed_between(shas[0], other, root) for other in shas[1:]]
        if all(files == [] for files in changed):
            return (
                f"The runs were made at different commits: {listed}; between them only the generated tables "
                f"and figures ({' and '.join(GENERATED)}) changed, no code or config."
            )
    return f"The runs were made at different commits: {listed}; the code changed between them."


def _budgets(spec, runs: list, finished: list[bool], timings: list[dict]) -> list[dict]:
    """One row per cell of a benchmark with a finished run: its budgets read from its first finished run's
    resolved config, its mean wall time a seed and the command that runs it alone."""
    rows, seen = [], set()
    for r, done in zip(runs, finished):
        cell, path = r.labels.get(CELL_AXIS), r.root / "quickstart" / "config.yaml"
        if not done or cell in seen or not path.is_file():
            continue
        seen.add(cell)
        cfg = OmegaConf.load(path)
        walls = [t[WALL] for t in timings if t[CELL_AXIS] == cell and t.get(WALL) is not None]
        rows.append(budget_row(cell, cfg, walls, spec.alone.get(cell)))
    return rows


def _fidelity(spec, runs: list, finished: list[bool]) -> list[dict]:
    """Fidelity rows of each distinct world model of the finished runs (`<run.fit>/metrics.json`), labelled by
    the first variant (or cell) that used it; a grid without an axis calls it `default`. The controls come
    from the first fit of each seed and cell (they depend on the log alone)."""
    rows, seen, controlled = [], set(), set()
    for r, done in zip(runs, finished):
        path = r.fit_dir / "metrics.json" if r.fit_dir else None
        if not done or path is None or path in seen or not path.is_file():
            continue
        seen.add(path)
        combo = "/".join(str(v) for k, v in r.labels.items() if k != "seed") or "default"
        log = (r.labels.get(CELL_AXIS), r.labels["seed"])
        metrics = read_json(path).get("metrics", {})
        rows += fidelity_rows(metrics, combo, r.labels["seed"], log not in controlled, r.labels.get(CELL_AXIS))
        controlled.add(log)
    return rows


def write_report(spec, runs: list, finished: list[bool]) -> Path:
    """Write the grid's tables and plots into `spec.out` (and a copy of the table to `spec.report`)."""
    out = Path(spec.out)
    key = CELL_AXIS if CELL_AXIS in spec.axes else "variant"
    est_rows, met_rows, timings, overlap, first, commits = _rows(spec, runs, finished)
    if not met_rows:
        raise RuntimeError(f"grid {spec.name}: no finished runs to report")
    met_rows.sort(key=lambda r: estimator_rank(r["estimator"]))  # uncalibrated ADWM first (stable otherwise)
    est_rows.sort(key=lambda r: estimator_rank(r["estimator"]))
    write_csv(out / "estimates.csv", est_rows)
    write_csv(out / "metrics.csv", met_rows)
    write_csv(out / "timings.csv", timings)
    seeds = sorted({r["seed"] for r in met_rows})
    n_done = sum(finished)
    status = "every run finished" if n_done == len(runs) else f"{n_done} of {len(runs)} runs finished so far"
    command = spec.command or f"adwm grid {spec.name}"
    parts = [
        f"# {spec.title or 'Grid `' + spec.name + '`'}",
        "",
        f"Generated by `{command}` from the runs under `{spec.out}` ({status}). Mean over seeds {seeds} with a "
        f"{spec.ci_level:.0%} percentile bootstrap CI ({spec.ci_resamples} resamples; the resampling unit is the "
        "seed). A NaN metric (constant or undefined estimates) is a failure and is counted. "
        + ESTIMATOR_NOTE
        + (
            ""
            if CELL_AXIS in spec.axes
            else f" ADWM has one row per variant; each baseline is shown once, from the `{first}` runs."
        ),
        "",
        commits_line(commits),
    ]
    if spec.note:
        parts += ["", f"> {spec.note}"]
    budgets = _budgets(spec, runs, finished, timings) if CELL_AXIS in spec.axes else []
    if budgets:
        parts += [
            "",
            "## Cells and budgets",
            "",
            "What each cell spends, from its runs' resolved configs; `wall a seed` is the mean wall time of its "
            "finished runs; `run alone` runs (or resumes) the cell's seeds by themselves, into the same runs.",
            "",
            budget_table(budgets),
        ]
    if CELL_AXIS in spec.axes:
        agg = aggregate(met_rows, ("estimator", CELL_AXIS), spec.ci_resamples, spec.ci_level)
        atomic_write_json(out / "aggregate.json", [{"estimator": e, CELL_AXIS: c, **v} for (e, c), v in agg.items()])
        for metric, title, sense in TABLE_METRICS:
            parts += ["", f"## {title} ({sense})", "", markdown_table(agg, 0, 1, metric)]
            plot_metric(agg, 0, 1, metric, out / f"{metric}.png")
        groups = {c: [r for r in est_rows if r[CELL_AXIS] == c] for c in dict.fromkeys(r[CELL_AXIS] for r in est_rows)}
        for cell, rows in groups.items():
            plot_scatter(rows, out / f"scatter_{cell}.png", f"J vs J_hat: {cell}")
    else:
        met_rows.sort(key=lambda r: not is_adwm(r["row"].split(" (")[0]))  # ADWM's variants first (stable otherwise)
        agg = aggregate(met_rows, ("row",), spec.ci_resamples, spec.ci_level)
        parts += ["", metrics_table(agg)]
        for m, _, _ in TABLE_METRICS:
            plot_metric(agg, 0, None, m, out / f"{m}.png")
        shown = [r for r in est_rows if r["variant"] == first or is_adwm(r["estimator"])]
        plot_scatter(shown, out / "scatter.png", f"J vs J_hat: {spec.name}")
        groups = {"": shown}
    if overlap:
        write_csv(out / "overlap.csv", overlap)
        parts += [
            "",
            "## Overlap of the log with each family",
            "",
            "The median over the family's policies of the importance weights' effective sample size (per episode, "
            "the product of the per-step ratios), as a share of the logged episodes: with exact behaviour "
            "probabilities and with those of the behaviour model fitted on the log (`_est`). Low shares are the "
            "regime where importance sampling fails and a world model need not.",
            "",
            mean_ci_table(overlap, key, OVERLAP_METRICS, spec.ci_resamples, spec.ci_level),
        ]
    fidelity = _fidelity(spec, runs, finished)
    if fidelity:
        write_csv(out / "fidelity.csv", fidelity)
        parts += [
            "",
            "## Fidelity of each world model",
            "",
            "`adwm fit`'s replays of held-out logged episodes with their logged actions (no calibration): the "
            "share of simulated states that match the real one after 1, 5 and 10 steps, beside the controls "
            "`stay` (the state does not change) and `nearest` (the logged successor of the nearest logged state "
            "and action) on the same replays; the correlation of simulated and logged returns; the simulated "
            "probability that an episode ends against the logged rate.",
            "",
            mean_ci_table(fidelity, "row", FIDELITY_METRICS, spec.ci_resamples, spec.ci_level, "world"),
        ]
    for name, rows in groups.items():
        for seed in seeds:
            picked = [r for r in rows if r["seed"] == seed]
            if picked:
                parts += ["", f"## J and J_hat: {name + ', ' if name else ''}seed {seed}", "", estimates_table(picked)]
    parts += [
        "",
        "## Time per stage (s)",
        "",
        "Seconds each stage took when it ran, read from its outputs (a resumed run reports the stages it found "
        "done at their real cost).",
        "",
        timing_table(timings, key),
    ]
    parts += ["", wall] if (wall := wall_line(timings)) else []
    table = out / "table.md"
    atomic_write_text(table, "\n".join(parts) + "\n")
    if spec.report:
        Path(spec.report).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(table, spec.report)
    return table
