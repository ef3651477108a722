"""Behaviour cloning makes an agent that beats random on held-out tasks, saved and reloaded via HF."""

from __future__ import annotations

import json

import numpy as np

from adwm.data.rollout import EpisodeJob, run_episodes
from adwm.envs import EnvConfig, make_env
from adwm.policies.factory import build_policy
from adwm.policies.llm import PolicyConfig
from adwm.policies.tiny import TinyModelConfig
from adwm.policies.train_agent import AgentConfig, AgentVariant, train_agent
from adwm.trainer import LoggerConfig, TrainerConfig


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


def test_length_buckets_give_the_loss_and_gradients_of_one_padded_pass(monkeypatch):
    """The behaviour-cloning loss over length-sorted passes equals one pass over the whole right-padded
    batch: the same action tokens, the same positions, the same mean."""
    import random

    import torch

    import adwm.policies.bc as bc
    from adwm.encoders.registry import train_tokenizer
    from adwm.policies.bc_data import DemoDataset, gold_demos
    from adwm.policies.tiny import make_tiny_llama

    env = make_env(EnvConfig())
    demos, texts = gold_demos(
        env, list(range(5_000_000, 5_000_012)), 0.3, random.Random(0), "Task: {task}\n{observation}\n> ", 0
    )
    tokenizer = train_tokenizer(texts, 400)
    torch.manual_seed(0)
    model = make_tiny_llama(
        TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=2), tokenizer
    )
    ds = DemoDataset(demos[:40], tokenizer, "\n")
    batch = ds.collate([ds[i] for i in range(40)])
    assert batch["attention_mask"].sum(1).unique().numel() > 5  # rows of many lengths
    module = bc.BehaviourCloningModule(model, 1e-3, 0.0, 1, 10)

    def run():
        model.zero_grad()
        loss, _ = module.model_step(batch)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    monkeypatch.setattr(bc, "LENGTH_BUCKETS", 3)
    loss, grads = run()
    monkeypatch.setattr(bc, "LENGTH_BUCKETS", 1)
    ref_loss, ref_grads = run()
    torch.testing.assert_close(loss, ref_loss, atol=1e-6, rtol=1e-5)
    assert len(grads) == len(ref_grads) > 0
    for g, ref in zip(grads, ref_grads):
        torch.testing.assert_close(g, ref, atol=1e-5, rtol=1e-4)
