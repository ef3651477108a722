"""Build a policy from its config: `kind` picks the agent, `eps` wraps it."""

from __future__ import annotations

from adwm.policies.base import Policy, UniformPolicy
from adwm.policies.config import POLICY_KINDS, PolicyConfig
from adwm.policies.heuristic import HeuristicPolicy
from adwm.policies.llm import LLMPolicy
from adwm.policies.wrappers import EpsilonGreedy


def build_policy(cfg: PolicyConfig, where: str = "policy") -> Policy:
    """`kind=llm` loads the model (cached per process), `heuristic` is the scripted player; `eps > 0` mixes in
    uniform actions."""
    if cfg.kind not in POLICY_KINDS:
        raise ValueError(f"{where}.kind: unknown policy kind '{cfg.kind}'; choose from {list(POLICY_KINDS)}")
    if cfg.kind == "uniform":
        return UniformPolicy(cfg.name)
    if cfg.kind == "heuristic":
        base = HeuristicPolicy(cfg.name, cfg.temperature)
        return EpsilonGreedy(base, cfg.eps, name=cfg.name) if cfg.eps > 0 else base
    if cfg.eps == 1.0:
        return EpsilonGreedy(UniformPolicy(cfg.name), 1.0, name=cfg.name)
    base = LLMPolicy(cfg, where)
    return EpsilonGreedy(base, cfg.eps, name=cfg.name) if cfg.eps > 0 else base
