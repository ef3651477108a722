"""benchmarks/worlds.py on hand-made estimates: the default row gives a calibrated and an uncalibrated
estimator, every other row one; metrics per seed against the run's ground truth; means over seeds with a
CI; the table names the held-out seeds."""

from __future__ import annotations

import pytest

from helpers import benchmark_module


def _summary(seed: int, truth: list[float]) -> dict:
    """A run's summary: its ground truth, and baselines that estimate J exactly (FQE) or reversed."""
    baselines = [{"fqe": j, "wdr": -j, "wdr_est": j + 0.1} for j in truth]
    return {
        "seed": seed,
        "policies": [{"name": f"p{k}", "J_true": j, "estimates": b} for k, (j, b) in enumerate(zip(truth, baselines))],
    }


def _results(calibrated: list[float], simulated: list[float], seconds: float = 2.0) -> dict:
    return {
        "estimates": {
            f"p{k}": {"J_hat": c, "J_hat_sim": s, "seconds": seconds}
            for k, (c, s) in enumerate(zip(calibrated, simulated))
        }
    }


def test_seed_figures_split_the_default_and_score_each_row():
    worlds = benchmark_module("worlds")
    truth = [0.1, 0.2, 0.3, 0.4]
    results = {
        "default": _results([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]),
        "stay": _results([0.2, 0.3, 0.4, 0.5], [0.2, 0.3, 0.4, 0.5], seconds=1.0),
    }
    figures = worlds.seed_figures(_summary(3, truth), results)
    assert list(figures) == ["adwm", "adwm_sim", "stay", "fqe", "wdr", "wdr_est"]
    assert figures["fqe"]["nrmse"] == 0 and figures["wdr"]["spearman"] == pytest.approx(-1.0)
    assert figures["wdr_est"]["nrmse"] == pytest.approx(0.1 / 0.3) and figures["fqe"]["seconds_per_policy"] is None
    assert figures["adwm"]["spearman"] == pytest.approx(1.0)
    assert figures["adwm"]["nrmse"] == pytest.approx(0.0)
    assert figures["adwm_sim"]["spearman"] == pytest.approx(-1.0)  # the simulated values, reversed
    # nRMSE: RMSE / (max J - min J) = 0.1 / 0.3 for an offset of 0.1 everywhere
    assert figures["stay"]["nrmse"] == pytest.approx(0.1 / 0.3)
    assert figures["stay"]["seconds_per_policy"] == 1.0
    assert figures["stay"]["estimates"] == {"p0": 0.2, "p1": 0.3, "p2": 0.4, "p3": 0.5}


def test_table_means_over_seeds_and_says_which_are_held_out():
    worlds = benchmark_module("worlds")
    per_seed = {
        s: {
            "adwm_sim": {"spearman": sp, "nrmse": nr, "regret_at_1": 0.0, "seconds_per_policy": 3.0},
            "oracle": {"spearman": 1.0, "nrmse": 0.05, "regret_at_1": 0.0, "seconds_per_policy": 1.0},
            "fqe": {"spearman": 1.0, "nrmse": 0.3, "regret_at_1": 0.0, "seconds_per_policy": None},
        }
        for s, sp, nr in ((3, 0.8, 0.2), (4, 1.0, 0.1))
    }
    text, figures = worlds.table(per_seed, "abc", "python benchmarks/worlds.py a b")
    assert figures["adwm_sim"]["spearman"]["mean"] == pytest.approx(0.9)
    assert figures["adwm_sim"]["nrmse"]["min"] == pytest.approx(0.1)
    lo, hi = figures["adwm_sim"]["nrmse"]["ci"]
    assert 0.1 <= lo <= 0.15 <= hi <= 0.2
    assert "Seeds [3, 4] are held out" in text
    assert "| adwm_sim | the default: the learned model picks" in text and "| 0.90 [" in text
    assert "0.80 / 0.200 | 1.00 / 0.100 | 3.0 |" in text
    # each other row against the default, paired by seed: 0.05 - 0.2 and 0.05 - 0.1
    assert figures["oracle"]["nrmse_minus_default"]["mean"] == pytest.approx(-0.1)
    assert "nrmse_minus_default" not in figures["adwm_sim"]
    assert "| oracle | the real environment" in text and "| -0.100 [-0.150, -0.050] |" in text
    assert figures["fqe"]["seconds_per_policy"] is None and text.rstrip().endswith("1.00 / 0.300 |  |")


def test_no_run_tabulates_the_estimates_files_as_they_are(tmp_path):
    worlds = benchmark_module("worlds")
    with pytest.raises(FileNotFoundError, match="no estimates of row 'stay'"):
        worlds.estimate(tmp_path, "stay", {"seed": 3}, run=False)
    (tmp_path / "worlds").mkdir()
    (tmp_path / "worlds" / "stay.json").write_text('{"estimates": {}}')
    assert worlds.estimate(tmp_path, "stay", {"seed": 3}, run=False) == {"estimates": {}}
