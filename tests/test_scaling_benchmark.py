"""benchmarks/scaling.py on hand-made grid runs: the mean over seeds per budget, the two curves, the table
and the plot; unfinished runs are left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import benchmark_module


def _scaling_module():
    return benchmark_module("scaling")


def _run(grid: Path, name: str, seed: int, steps: int, episodes: int, spearman: float, acc: float, done=True):
    """A finished grid run: its summary (config, uncalibrated metrics, log path) and its fit's metrics."""
    run, fit = grid / "runs" / name, grid / "shared" / name / "fit"
    (run / "quickstart").mkdir(parents=True)
    fit.mkdir(parents=True)
    log = grid / "log.jsonl"
    log.write_text("{}\n" * 40)  # 40 logged episodes
    cfg = {"run": {"fit": str(fit)}, "fit": {"max_steps": steps}, "data": {"max_episodes": episodes}}
    metrics = {"adwm": {"spearman": spearman, "nrmse": 1 - spearman, "regret_at_1": 0.0}}
    (run / "quickstart" / "config.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    config = str(run / "quickstart" / "config.yaml")
    summary = {"config": config, "metrics": metrics, "seed": seed, "behaviour_log": str(log), "commit": "abc"}
    (run / "quickstart" / "summary.json").write_text(json.dumps(summary))
    fidelity = {"fidelity/state_acc@1": acc, "fidelity/state_acc@10": acc / 2, "fidelity/return_corr": 0.5}
    (fit / "metrics.json").write_text(json.dumps({"global_step": steps, "seconds": steps / 10, "metrics": fidelity}))
    if done:
        (run / "grid_run.json").write_text("{}")


def test_budget_curve_means_seeds_and_splits_steps_from_log_size(tmp_path):
    scaling = _scaling_module()
    grid = tmp_path / "scaling"
    for seed, shift in ((3, 0.0), (4, 0.2)):
        _run(grid, f"s100-seed{seed}", seed, 100, 0, 0.2 + shift, 0.2)
        _run(grid, f"s400-seed{seed}", seed, 400, 0, 0.6 + shift, 0.6)
        _run(grid, f"s200-seed{seed}", seed, 200, 0, 0.4 + shift, 0.4)
        _run(grid, f"log10-seed{seed}", seed, 200, 10, 0.1 + shift, 0.1)
    _run(grid, "s800-seed3", 3, 800, 0, 1.0, 1.0, done=False)  # not finished: left out
    out = tmp_path / "docs"
    md = scaling.main([grid], out / "scaling.md", out / "scaling.png", out / "scaling.json")
    rows = json.loads((out / "scaling.json").read_text())["grids"]["scaling"]
    assert [(r["max_steps"], r["episodes"]) for r in rows] == [(200, 10), (100, 40), (200, 40), (400, 40)]
    full = {r["max_steps"]: r for r in rows if r["episodes"] == 40}
    assert full[400]["spearman"] == pytest.approx(0.7) and full[400]["seeds"] == [3, 4]
    assert full[100]["nrmse"] == pytest.approx(0.7) and full[100]["state_acc@10"] == pytest.approx(0.1)
    assert full[200]["fit_s"] == pytest.approx(20.0)
    by_steps, by_size = scaling.curves(rows)
    assert [r["max_steps"] for r in by_steps] == [100, 200, 400]
    assert [r["episodes"] for r in by_size] == [10, 40] and {r["max_steps"] for r in by_size} == {200}
    text = md.read_text()
    assert "| 400 | 40 | 3, 4 | 40 | 0.70 | 0.300 | 0.00 | 0.60 | 0.30 | 0.50 |" in text
    assert "\n| 800 |" not in text
    assert (out / "scaling.png").stat().st_size > 1000


def test_a_grid_with_no_finished_run_is_named(tmp_path):
    scaling = _scaling_module()
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no finished run under .*empty/runs"):
        scaling.main([tmp_path / "empty"], tmp_path / "a.md", tmp_path / "a.png", tmp_path / "a.json")


def test_keep_tables_the_recorded_points_of_the_grids_it_is_not_given(tmp_path):
    scaling = _scaling_module()
    out = tmp_path / "docs"
    paths = (out / "scaling.md", out / "scaling.png", out / "scaling.json")
    with pytest.raises(SystemExit, match="--keep: .*scaling.json does not exist"):
        scaling.main([tmp_path / "none"], *paths, keep=True)
    builtin, tw = tmp_path / "scaling", tmp_path / "scaling_textworld"
    _run(builtin, "s100-seed3", 3, 100, 0, 0.2, 0.2)
    _run(builtin, "s400-seed3", 3, 400, 0, 0.6, 0.6)
    scaling.main([builtin], *paths)
    before = json.loads(paths[2].read_text())["grids"]["scaling"]
    for run in (builtin / "runs").iterdir():  # the first grid's runs are gone (another machine)
        (run / "grid_run.json").unlink()
    _run(tw, "s700-seed3", 3, 700, 0, 0.9, 0.5)
    md = scaling.main([tw], *paths, keep=True).read_text()
    recorded = json.loads(paths[2].read_text())
    assert list(recorded["grids"]) == ["scaling", "scaling_textworld"]
    assert recorded["grids"]["scaling"] == before
    assert [r["max_steps"] for r in recorded["grids"]["scaling_textworld"]] == [700]
    assert "`python benchmarks/scaling.py --keep " in md
    kept, fresh = md.split("## scaling_textworld")
    assert "as recorded in" in kept and "| 400 | 40 | 3 | 40 | 0.60 | 0.400 |" in kept
    assert "as recorded in" not in fresh and "| 700 | 40 | 3 | 70 | 0.90 | 0.100 |" in fresh
    # without --keep only the grids named are tabled
    md = scaling.main([tw], *paths).read_text()
    assert "## scaling\n" not in md and list(json.loads(paths[2].read_text())["grids"]) == ["scaling_textworld"]
