"""benchmarks/replay_correction.py on a hand-made grid run: the scaled and shifted estimates' metrics against
values computed by hand, an unfinished run left out, and a fit without the replay metrics named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import benchmark_module


def _run(grid, name: str, seed: int, j: list[float], j_hat: list[float], replay: dict | None):
    run, fit = grid / "runs" / name, grid / "shared" / name / "fit"
    (run / "quickstart").mkdir(parents=True)
    fit.mkdir(parents=True)
    policies = [{"J_true": a, "estimates": {"adwm_sim": b}} for a, b in zip(j, j_hat)]
    (run / "quickstart" / "config.yaml").write_text(f"run:\n  fit: {fit}\n")
    summary = {"config": str(run / "quickstart" / "config.yaml"), "seed": seed, "policies": policies}
    (run / "quickstart" / "summary.json").write_text(json.dumps(summary))
    (fit / "metrics.json").write_text(json.dumps({"metrics": replay or {}}))


def test_the_replay_gap_scales_and_shifts_the_simulated_values(tmp_path):
    rc = benchmark_module("replay_correction")
    j, j_hat = [0.1, 0.2, 0.4], [0.3, 0.2, 0.6]  # ranks 1 / 0 / 2 against 0 / 1 / 2
    gap = {"rollout_heads/after_return_logged": 0.2, "rollout_heads/after_return_simulated": 0.4}
    _run(tmp_path, "full-seed3", 3, j, j_hat, gap)
    (tmp_path / "runs" / "full-seed4").mkdir(parents=True)  # unfinished: no summary yet
    out = rc.grid_runs(tmp_path)
    assert list(out) == [str(tmp_path / "runs" / "full-seed3")]
    e = out[str(tmp_path / "runs" / "full-seed3")]
    assert e["seed"] == 3 and e["replay_logged"] == 0.2 and e["replay_simulated"] == 0.4
    # by hand: scaled = j_hat / 2 = [0.15, 0.1, 0.3], errors [0.05, -0.1, -0.1]; shifted = j_hat - 0.2 = [0.1, 0, 0.4]
    assert e["scaled"]["nrmse"] == pytest.approx(np.sqrt((0.05**2 + 0.1**2 + 0.1**2) / 3) / 0.3)
    assert e["shifted"]["nrmse"] == pytest.approx(np.sqrt(0.2**2 / 3) / 0.3)
    assert e["raw"]["nrmse"] == pytest.approx(np.sqrt((0.2**2 + 0 + 0.2**2) / 3) / 0.3)
    # a positive scale and a shift keep the ranking: Spearman of [1, 0, 2] against [0, 1, 2] is 0.5
    assert e["raw"]["spearman"] == e["scaled"]["spearman"] == e["shifted"]["spearman"] == pytest.approx(0.5)
    assert "full-seed3" in rc.table(out)


def test_a_fit_without_the_replay_metrics_is_named(tmp_path):
    rc = benchmark_module("replay_correction")
    _run(tmp_path, "full-seed3", 3, [0.1, 0.2], [0.1, 0.2], None)
    with pytest.raises(SystemExit, match=r"metrics.json: no rollout_heads/after_return_logged"):
        rc.grid_runs(tmp_path)
