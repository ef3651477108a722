"""Behaviour cloning makes an agent that beats random on held-out tasks, saved and reloaded via HF."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adwm.data.play import EpisodeJob, run_episodes
from adwm.envs import EnvConfig, make_env
from adwm.policies.config import PolicyConfig, TinyModelConfig
from adwm.policies.factory import build_policy
from adwm.runtime.config import LoggerConfig, TrainerConfig
from adwm.stages.config import AgentConfig, AgentVariant
from adwm.stages.train_agent import train_agent


def mean_return(policy_cfg: PolicyConfig, env_cfg: EnvConfig, n: int) -> float:
    returns: list[float] = []
    jobs = [EpisodeJob(i, 9_000_000 + i, (1, i), policy_cfg.name) for i in range(n)]  # held-out seeds
    run_episodes(
        lambda: make_env(env_cfg),
        {policy_cfg.name: build_policy(policy_cfg)},
        jobs,
        lambda ep: returns.append(ep.discounted_return(env_cfg.gamma)),
        n_envs=32,
    )
    return float(np.mean(returns))


@pytest.mark.ci
@pytest.mark.slow  # ~80 s; CI runs it (.ci/run)
def test_bc_agent_beats_random_on_held_out_seeds(tmp_path):
    agent = AgentConfig(
        dir=str(tmp_path),
        model=TinyModelConfig(vocab_size=800, hidden_size=128, intermediate_size=384, num_layers=3),
        variants={"small": AgentVariant(episodes=150, steps=250)},
    )
    prompt = PolicyConfig(history_turns=0)
    env_cfg = EnvConfig()
    path = train_agent(agent, "small", env_cfg, prompt, TrainerConfig(enable_progress_bar=False), LoggerConfig(), 0, {})
    meta = json.loads((path / "adwm_agent.json").read_text())
    assert meta["train_examples"] > 0 and (path / "tokenizer.json").is_file()
    agent_j = mean_return(PolicyConfig(name="small", model=str(path), history_turns=0), env_cfg, 64)
    random_j = mean_return(PolicyConfig(name="uniform", kind="uniform"), env_cfg, 64)
    assert agent_j > random_j + 0.08, (agent_j, random_j)
