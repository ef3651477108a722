"""`adwm evaluate-log`: one's own agents on one's own log (no behaviour probabilities, no admissible lists)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from adwm.cli import main
from adwm.policies.config import PolicyConfig
from adwm.policies.llm import LLMPolicy
from adwm.policies.soft_prompt import SoftPromptScorer
from helpers import write_api_agent_log


@pytest.fixture
def api_log(tmp_path):
    path = tmp_path / "api_agent.jsonl"
    write_api_agent_log(path, 16)
    return path


def _run(tmp_path, log, agents: list[str], *extra: str) -> int:
    return main(
        [
            "evaluate-log",
            "experiment=smoke",
            f"run.root={tmp_path / 'runs'}",
            f"data.log={log}",
            f"evaluate_log.agents=[{','.join(agents)}]",
            *extra,
        ]
    )


def test_two_agents_on_a_free_form_log_then_a_third_accumulates(tmp_path, api_log, tiny_lm_dir, bc_agent_dir, capsys):
    lines = [json.loads(x) for x in api_log.read_text().splitlines()]
    assert all(s.get("admissible") is None and "behavior_logprob" not in s for ep in lines for s in ep["steps"])
    assert _run(tmp_path, api_log, [tiny_lm_dir, bc_agent_dir]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    path = tmp_path / "runs" / "evaluate-log" / "estimates.json"
    assert out[-1] == str(path)  # the result's path, last
    first = json.loads(path.read_text())
    names = [p.rsplit("/", 1)[-1] for p in (tiny_lm_dir, bc_agent_dir)]
    assert first["family"] == names and first["calibration"]["method"] == "none"
    for n in names:
        e = first["estimates"][n]
        assert e["settings"]["policy"]["mode"] == "generate"  # the agents write their actions
        assert e["J_hat"] == e["J_hat_sim"] and e["ci"][0] <= e["J_hat"] <= e["ci"][1]
    assert "metrics" not in first  # no ground truth
    assert (tmp_path / "runs" / "evaluate-log" / "fit" / "checkpoints" / "last.ckpt").is_file()
    assert (tmp_path / "runs" / "evaluate-log" / "config.yaml").is_file()

    third = tmp_path / "third_agent"
    shutil.copytree(tiny_lm_dir, third)
    assert _run(tmp_path, api_log, [str(third)]) == 0
    second = json.loads(path.read_text())
    assert second["family"] == ["third_agent"]
    assert set(second["estimates"]) == {*names, "third_agent"}  # nothing overwritten
    for n in names:  # the first run's entries are untouched (the world model was reused, not refitted)
        assert second["estimates"][n] == first["estimates"][n]


def _rename_env(src, dst, names) -> None:
    lines = [json.loads(x) for x in src.read_text().splitlines()]
    dst.write_text("".join(json.dumps({**ep, "env": names(k)}) + "\n" for k, ep in enumerate(lines)))


def test_a_log_of_an_environment_adwm_does_not_know_is_read_with_env_log(tmp_path, api_log, tiny_lm_dir, capsys):
    foreign = tmp_path / "acme.jsonl"
    _rename_env(api_log, foreign, lambda k: "acme-web-shop")
    assert _run(tmp_path, foreign, [tiny_lm_dir]) == 2  # the configured builtin world refuses it, naming env=log
    err = capsys.readouterr().err
    assert f"{foreign}:1: field 'env'" in err and "'acme-web-shop'" in err and "env=log" in err
    assert _run(tmp_path, foreign, [tiny_lm_dir], "env=log") == 0
    result = json.loads((tmp_path / "runs" / "evaluate-log" / "estimates.json").read_text())
    e = result["estimates"][tiny_lm_dir.rsplit("/", 1)[-1]]
    assert e["settings"]["world"] == "diffusion" and np.isfinite(e["J_hat"])  # the learned world, env=log's default

    mixed = tmp_path / "mixed.jsonl"
    _rename_env(api_log, mixed, lambda k: "acme-web-shop" if k < 3 else "acme-helpdesk")
    assert _run(tmp_path, mixed, [tiny_lm_dir], "env=log") == 2
    err = capsys.readouterr().err
    assert f"{mixed}:4: field 'env'" in err and "'acme-helpdesk'" in err and "first from 'acme-web-shop'" in err
    for command in ("collect", "ground-truth", "quickstart"):  # nothing can play an episode in a log
        assert main([command, "experiment=smoke", "env=log", f"run.root={tmp_path / 'runs'}"]) == 2
        assert f"env.name: `adwm {command}` plays episodes" in capsys.readouterr().err


def test_bad_agent_sources_are_named(tmp_path, api_log, capsys):
    assert _run(tmp_path, api_log, []) == 2
    assert "evaluate_log.agents: expected at least one agent" in capsys.readouterr().err
    assert _run(tmp_path, api_log, ["SomeOrg/some-model"]) == 2
    err = capsys.readouterr().err
    assert "evaluate_log.agents[0]: 'SomeOrg/some-model'" in err and "set hub=true" in err
    assert _run(tmp_path, api_log, [str(tmp_path / "missing.gguf")]) == 2
    assert "evaluate_log.agents[0]: GGUF file" in capsys.readouterr().err
    assert _run(tmp_path, api_log, [str(tmp_path / "nowhere" / "agent")]) == 2
    assert "evaluate_log.agents[0]: model folder" in capsys.readouterr().err


def test_same_named_agents_are_refused(tmp_path, api_log, tiny_lm_dir, capsys):
    other = tmp_path / "elsewhere" / tiny_lm_dir.rsplit("/", 1)[-1]
    shutil.copytree(tiny_lm_dir, other)
    assert _run(tmp_path, api_log, [tiny_lm_dir, str(other)]) == 2
    assert "evaluate_log.agents: expected agents of distinct names" in capsys.readouterr().err


def test_writing_from_soft_tokens_equals_writing_from_the_same_tokens_as_text(tiny_lm_dir):
    """Soft tokens that are the embeddings of the observation's tokens make the agent write what it writes
    reading those tokens as ids (inputs_embeds and input_ids paths of one model)."""
    policy = LLMPolicy(
        PolicyConfig(model=tiny_lm_dir, mode="generate", temperature=0.0, history_turns=0, max_new_tokens=6)
    )
    scorer = SoftPromptScorer(policy)
    tasks = ["find the key", "open the red box"]
    observations = ["You are in the kitchen. A key lies here.", "A red box is closed."]
    obs_ids = [policy.tokenizer(o, add_special_tokens=False)["input_ids"] for o in observations]
    width = min(len(x) for x in obs_ids)
    obs_ids = [x[:width] for x in obs_ids]  # equal lengths: one soft tensor
    soft = scorer.embedding(torch.tensor(obs_ids)).detach()
    rngs = [np.random.default_rng(0) for _ in tasks]
    written = scorer.write(tasks, soft, rngs)
    as_ids = [scorer._prefix(t) + ids + scorer.after_ids for t, ids in zip(tasks, obs_ids)]
    assert written == policy.write(as_ids, rngs)
    assert all(isinstance(w, str) for w in written)


def test_free_form_rollouts_embed_what_the_agent_wrote(tmp_path):
    """In a world model of a free-form log the agent's written text (not a logged action) is what the action
    encoder embeds each step; the eps share draws logged actions."""
    from adwm.guidance.config import GuidanceConfig
    from adwm.simulation.choices import written_actions
    from adwm.simulation.config import SimulateConfig
    from adwm.simulation.simulate import simulate
    from adwm.simulation.starts import attach_logged_worlds, logged_starts
    from helpers import uniform_log_world_model

    dm, wm = uniform_log_world_model(tmp_path, n_episodes=6, max_steps=4, val_fraction=0.0, sampler_steps=2)
    states = dm.logged_states("train")
    wm.build_proposal_bank(states, [[] for _ in states])
    attach_logged_worlds(wm, dm)  # as adwm evaluate does
    assert wm.free_form

    class Writer:
        def __init__(self):
            self.calls = 0

        def write(self, z, tasks, rngs):
            self.calls += 1
            return ["hum a tune"] * len(tasks)

    embedded: list[str] = []
    real = wm.embed_actions
    wm.embed_actions = lambda texts: embedded.extend(texts) or real(texts)
    reader = Writer()
    cfg = SimulateConfig(n_rollouts=5, horizon=3, batch_size=5)
    returns = simulate(wm, PolicyConfig(name="w"), reader, logged_starts(dm), cfg, GuidanceConfig(), 0.9, 3, 0)
    assert returns.shape == (5,) and reader.calls >= 1
    assert embedded and set(embedded) == {"hum a tune"}

    rngs = [np.random.default_rng(k) for k in range(20)]
    drawn = written_actions(wm, PolicyConfig(name="r", eps=1.0), reader, None, ["t"] * 20, rngs)
    assert set(drawn) <= set(wm.actions) and len(set(drawn)) > 1


def test_a_writing_agents_simulation_is_the_same_with_its_logits_kept_and_writes_less(tmp_path, tiny_lm_dir):
    """The text reader keeps a writing agent's next-token logits per logged text (`write_cache_mb`): the
    simulated returns are those of writing every step afresh, and a second policy of the same checkpoint at
    another temperature reuses what the first computed."""
    from adwm.guidance.config import GuidanceConfig
    from adwm.runtime import costs
    from adwm.simulation.config import SimulateConfig
    from adwm.simulation.readers import NearestTextReader
    from adwm.simulation.simulate import simulate
    from adwm.simulation.starts import attach_logged_worlds, logged_starts
    from helpers import uniform_log_world_model

    dm, wm = uniform_log_world_model(tmp_path, n_episodes=6, max_steps=4, val_fraction=0.0, sampler_steps=2)
    states = dm.logged_states("train")
    wm.build_proposal_bank(states, [[] for _ in states])
    attach_logged_worlds(wm, dm)  # as adwm evaluate does
    cfg = SimulateConfig(n_rollouts=12, horizon=4, batch_size=12)
    starts, cache = logged_starts(dm), {}

    def run(temperature: float, mb: float, shared: dict | None) -> tuple[np.ndarray, dict]:
        pcfg = PolicyConfig(name="w", model=tiny_lm_dir, mode="generate", temperature=temperature, max_new_tokens=5)
        reader = NearestTextReader(wm, LLMPolicy(pcfg), shared, write_cache_mb=mb)
        with costs.recording() as record:
            returns = simulate(wm, pcfg, reader, starts, cfg, GuidanceConfig(eta=0.0), 0.9, 4, 0)
        return returns, record.to_dict()["counts"]

    fresh, counts = run(1.0, 0.0, None)
    assert "writer/states" not in counts  # no tree: every state written by the model
    kept, counts = run(1.0, 64.0, cache)
    np.testing.assert_array_equal(kept, fresh)
    tree = next(v for k, v in cache.items() if k[0] == "writer")
    assert counts["writer/states"] > 0 and len(tree) > 0
    # a greedy policy of the same checkpoint shares the tree; run again, it writes without the model
    first, _ = run(0.0, 64.0, cache)
    again, counts = run(0.0, 64.0, cache)
    np.testing.assert_array_equal(again, first)
    assert counts["writer/states_generated"] == 0 and counts.get("agent/forward_passes", 0) == 0
    assert [k[0] for k in cache].count("writer") == 1  # one tree for the checkpoint, whatever the temperature
