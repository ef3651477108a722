"""`adwm credit`: per-step values and credit of logged episodes, in the learned world and in the oracle."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adwm.cli import main
from adwm.config import load_config
from adwm.data.schema import read_episodes
from adwm.policies.base import AgentState, UniformPolicy
from adwm.stages.credit import preferred_actions
from helpers import reads, write_api_agent_log


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("world", ["guided_analogy", "oracle"])
def test_credit_of_every_step_of_the_lowest_return_episodes(smoke_run, tmp_path, one_thread, world):
    out = tmp_path / "credit"
    ov = [*reads(smoke_run), f"credit.out={out}", "credit.n_episodes=2", "credit.rollouts=2", f"evaluate.world={world}"]
    assert main(["credit", *ov]) == 0
    rows = _rows(out / "credit.jsonl")
    meta = json.loads((out / "credit.meta.json").read_text())
    log = read_episodes(smoke_run / "collect" / "episodes.jsonl")
    gamma = load_config(ov, "credit").env.gamma
    returns = [ep.discounted_return(gamma) for ep in log]
    assert meta["value_range"] == pytest.approx([min(returns), max(returns)])
    assert meta["episodes"] == sorted(np.argsort(returns, kind="stable")[:2].tolist())
    lo, hi = meta["value_range"]
    norm = lambda x: float(np.clip((x - lo) / (hi - lo), 0, 1))  # noqa: E731
    for i in meta["episodes"]:
        mine = [r for r in rows if r["episode"] == i]
        assert [r["t"] for r in mine] == list(range(len(log[i].steps)))
        assert [r["action"] for r in mine] == [s.action for s in log[i].steps]
        for r, nxt in zip(mine, mine[1:] + [None]):
            assert 0 <= r["V"] <= 1 and 0 <= r["Q_preferred"] <= 1 and r["V"] == pytest.approx(norm(r["V_raw"]))
            after = r["reward"] + gamma * (nxt["V_raw"] if nxt else 0.0)  # V after the last step is 0
            assert r["credit"] == pytest.approx(norm(after) - r["V"])
            assert r["preferred_action"] in log[i].steps[r["t"]].admissible
        assert (out / "plots" / f"episode_{i}.png").stat().st_size > 1000
    # a rerun with the same settings skips what is written; other settings are refused, naming the file
    assert main(["credit", *ov]) == 0
    assert _rows(out / "credit.jsonl") == rows
    assert main(["credit", *ov, "credit.rollouts=3"]) == 2


def test_credit_refuses_a_file_of_other_settings_and_bad_indices(smoke_run, tmp_path, capsys):
    out = tmp_path / "credit"
    out.mkdir()
    (out / "credit.jsonl").write_text(json.dumps({"episode": 0, "settings": "another"}) + "\n")
    ov = [*reads(smoke_run), f"credit.out={out}", "credit.rollouts=1", "evaluate.world=oracle"]
    assert main(["credit", *ov, "credit.episodes=[0]"]) == 2
    assert f"{out / 'credit.jsonl'}:1: holds credit of other settings" in capsys.readouterr().err
    assert main(["credit", *ov, "credit.episodes=[999]"]) == 2
    assert "credit.episodes[0]: the log" in capsys.readouterr().err
    assert main(["credit", *ov, "credit.value_range=[1,0]"]) == 2
    assert "credit.value_range: expected [low, high] with low < high" in capsys.readouterr().err


def test_the_preferred_action_is_the_most_probable_one():
    class Leaning(UniformPolicy):
        def log_distributions(self, states):
            return [np.log(np.arange(1, len(s.admissible) + 1) / sum(range(1, len(s.admissible) + 1))) for s in states]

    states = [AgentState("t", "o", [], ["a", "b", "c"]), AgentState("t", "o", [], ["x", "y"])]
    assert preferred_actions(Leaning("l"), states, np.random.default_rng(0)) == ["c", "y"]


def test_credit_on_a_log_without_behaviour_probabilities_or_lists(tmp_path, tiny_lm_dir, one_thread):
    log = tmp_path / "api_agent.jsonl"
    write_api_agent_log(log, 10)
    out = tmp_path / "credit"
    ov = ["experiment=smoke", f"run.root={tmp_path}", f"data.log={log}", f"credit.agent={tiny_lm_dir}"]
    ov += [f"credit.out={out}", "credit.n_episodes=1", "credit.rollouts=2", "evaluate.world=nearest"]
    assert main(["credit", *ov]) == 0
    rows = _rows(out / "credit.jsonl")
    assert rows and all(np.isfinite(r["credit"]) and isinstance(r["preferred_action"], str) for r in rows)
    assert rows[0]["agent"] == tiny_lm_dir.rstrip("/").rsplit("/", 1)[-1]
