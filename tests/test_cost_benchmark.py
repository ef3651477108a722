"""benchmarks/cost.py on the smoke run: the online ground truth and the estimate side by side, every part
of a simulated step named, the figures consistent with each other and the table made from them."""

from __future__ import annotations

import pytest

from helpers import benchmark_module


def _cost_module():
    return benchmark_module("cost")


@pytest.mark.ci
@pytest.mark.slow  # ground truth, estimate, calibration, memory and profile of the smoke run; in the CI selection
def test_cost_benchmark_measures_both_sides_and_names_where_the_time_goes(smoke_run, one_thread):
    cost = _cost_module()
    entry = cost.measure(["experiment=smoke", f"run.root={smoke_run}"], "smoke")
    online, estimate = entry["online"], entry["estimate"]
    family = entry["settings"]["family"]
    assert online["seconds"] > 0 and online["steps"] > 0
    # the online agents read one state a step, except the eps share and the never-reading policies
    assert 0 < online["agent_states_read"] <= online["steps"] and online["agent_forward_passes"] > 0
    assert online["agent_s"] + online["env_s"] <= online["seconds"] + 0.15  # each rounded to 0.1 s
    sim = estimate["simulation"]
    assert set(sim["parts"]) == set(cost.SIM_PARTS) and sim["parts"]["choose"] > 0 and sim["parts"]["denoise"] > 0
    assert sim["seconds"] == pytest.approx(sum(sim["parts"].values()), abs=0.3)
    assert sim["seconds"] + estimate["projector_s"] + estimate["tail_value_s"] <= estimate["seconds"] + 0.5
    assert sim["step_over_choose"] >= 1  # a simulated step includes the agent's choice
    # taken before rounding; the simulation's seconds are rounded to 0.1 s and its parts to 0.01 s
    sim_s, choose_s = sim["seconds"], sim["parts"]["choose"]
    assert (
        (sim_s - 0.05) / (choose_s + 0.005) - 0.01
        <= sim["step_over_choose"]
        <= (sim_s + 0.05) / max(choose_s - 0.005, 1e-9) + 0.01
    )
    assert sim["agent_states_read"]["choose"] <= sim["rollout_steps"]
    # the default world: the analogy world's proposals are timed; no text reader of latents
    assert sim["parts"]["propose"] > 0 and sim["reader_states"] == 0
    # the ratio is taken before rounding; the seconds it is checked against are rounded to 0.1 s
    est_s, on_s = estimate["seconds"], online["seconds"]
    assert (
        (est_s - 0.05) / (on_s + 0.05) - 1e-3
        <= entry["ratio_estimate_to_online"]
        <= (est_s + 0.05) / (on_s - 0.05) + 1e-3
    )
    assert sorted(estimate["per_policy_s"]) == sorted(family)
    assert entry["accuracy"]["uncalibrated"] is not None  # the ground truth it measured is the reference
    assert all(v > 0 for v in entry["peak_mb_by_rollouts"].values()) and len(entry["peak_mb_by_rollouts"]) == 2
    assert entry["profile_two_steps"] and all(r["self_ms"] >= 0 for r in entry["profile_two_steps"])
    assert entry["memory_probe"] == "fresh processes"
    # the estimate alone, for comparing code: the same simulation parts, from scratch each time
    # (here the learned model alone: its parts are the snap's retrieval, no proposals)
    alone = cost.measure_estimate(["experiment=smoke", f"run.root={smoke_run}", "evaluate.world=diffusion"], 2)
    assert len(alone["runs"]) == 2 and all(r["seconds"] > 0 and r["simulation"]["choose"] > 0 for r in alone["runs"])
    assert all(r["simulation"]["retrieval"] > 0 and r["simulation"]["propose"] == 0 for r in alone["runs"])
    # one forward over two policies' rollout batches against two forwards: timed for both parts
    batching = cost.measure_batching(["experiment=smoke", f"run.root={smoke_run}"], 2, repeats=1)
    for part in ("denoise", "agent"):
        t = batching[part]
        assert t["one_batch_s"] > 0 and t["k_batches_at_once_s"] > 0
        assert t["saving"] == pytest.approx(1 - t["k_batches_at_once_s"] / (2 * t["one_batch_s"]), abs=0.02)
    text = cost.table({"smoke/test": entry})
    assert "| smoke/test |" in text and "## Profile of two simulated steps: smoke/test" in text
