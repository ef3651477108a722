"""`adwm quickstart env=shop` and `env=multihop` end to end on the smoke budget: the world model and the
agents work with each world's observations and open action spaces, with no world-specific code outside
`envs/`."""

from __future__ import annotations

import json

import pytest

from adwm.cli import main
from adwm.data.schema import read_episodes


@pytest.mark.ci
@pytest.mark.slow  # ~15 s each; in the CI selection (.ci/run)
@pytest.mark.parametrize("env", ["shop", "multihop"])
def test_quickstart_runs_on_the_world(env, tmp_path, capsys):
    assert main(["quickstart", "experiment=smoke", f"env={env}", f"run.root={tmp_path}"]) == 0
    summary_path = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(open(summary_path).read())
    assert len(summary["policies"]) == 7
    for p in summary["policies"]:
        assert {"adwm", "adwm_sim", "is", "fqe"} <= set(p["estimates"])
        assert 0.0 <= p["J_true"] <= 1.0
    episodes = read_episodes(tmp_path / "collect" / "episodes.jsonl")
    assert episodes and all(e.env == env for e in episodes)
    first = episodes[0].steps[0]
    marker = "[search page]" if env == "shop" else "Search the knowledge base"
    assert marker in first.observation and first.admissible
