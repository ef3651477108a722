"""Logged episodes -> OPE inputs: agent states, the evaluated policy's exact distributions, padded arrays.

The evaluated policy's probabilities of the logged actions use its own sampling
rule: the agent's summed log-likelihood scores of the admissible actions, its
temperature, then the exact epsilon mixture `(1 - eps) pi + eps / |A(s)|`.
Scores depend only on the checkpoint and the prompt, so one pass over the log
serves a whole epsilon family; they are cached on disk per checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adwm.atomic import atomic_write_bytes
from adwm.data.schema import Episode
from adwm.ope.base import OPEData
from adwm.policies.base import AgentState, Policy, UniformPolicy
from adwm.policies.distribution import uses_model
from adwm.policies.llm import LLMPolicy, PolicyConfig, scores_to_log_probs
from adwm.policies.loading import model_fingerprint
from adwm.policies.prompt import render_prompt
from adwm.policies.wrappers import EpsilonGreedy


def logged_states(episodes: Sequence[Episode]) -> list[AgentState]:
    """Every logged step as the agent saw it (task, observation, past turns, admissible list), episode-major."""
    out = []
    for ep in episodes:
        history: list[tuple[str, str]] = []
        for step in ep.steps:
            out.append(AgentState(ep.task, step.observation, list(history), step.admissible))
            history.append((step.observation, step.action))
    return out


def require_candidates(states: Sequence[AgentState], log: str) -> None:
    for k, s in enumerate(states):
        if not s.admissible:
            raise ValueError(
                f"{log}: logged step {k} has no admissible action list; the baselines need the candidate "
                "actions to compute the evaluated policy's probabilities"
            )


class _Fixed(Policy):
    """Precomputed per-state distributions, in the order of the states they were computed for."""

    def __init__(self, name: str, dists: list[np.ndarray]) -> None:
        self.name, self.dists = name, dists

    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        if len(states) != len(self.dists):
            raise ValueError("precomputed distributions: asked for other states than they were computed for")
        return self.dists


class ScoreCache:
    """The agents' summed log-likelihood scores of every logged state's admissible actions, per checkpoint."""

    def __init__(self, folder: Path | None, log_id: str) -> None:
        self.folder, self.log_id, self.memory = folder, log_id, {}

    def key(self, pcfg: PolicyConfig) -> str:
        prompt = {k: getattr(pcfg, k) for k in ("model", "tokenizer", "gguf_file", "prompt_template", "history_turns")}
        prompt |= {"action_suffix": pcfg.action_suffix, "weights": model_fingerprint(pcfg.model), "log": self.log_id}
        return hashlib.sha1(json.dumps(prompt, sort_keys=True).encode()).hexdigest()[:16]

    def scores(self, pcfg: PolicyConfig, states: Sequence[AgentState]) -> list[np.ndarray]:
        key = self.key(pcfg)
        if key in self.memory:
            return self.memory[key]
        path = self.folder / f"scores_{key}.npz" if self.folder is not None else None
        if path is not None and path.is_file():
            with np.load(path) as z:
                flat, bounds = z["flat"], z["bounds"]
        else:
            base = dataclasses.replace(pcfg, eps=0.0, temperature=1.0)
            # logs revisit states: score each distinct (prompt, candidates) once
            keys = [(render_prompt(pcfg.prompt_template, s, pcfg.history_turns), tuple(s.admissible)) for s in states]
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            unique = list(first)
            scored = LLMPolicy(base, f"policy '{pcfg.name}'").action_scores([states[first[k]] for k in unique])
            by_key = dict(zip(unique, scored))
            per_state = [by_key[k] for k in keys]
            flat = np.concatenate(per_state) if per_state else np.zeros(0)
            bounds = np.cumsum([0] + [len(s) for s in per_state])
            if path is not None:
                buf = io.BytesIO()
                np.savez(buf, flat=flat, bounds=bounds)
                atomic_write_bytes(path, buf.getvalue())
        out = [flat[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        self.memory[key] = out
        return out


def policy_distributions(pcfg: PolicyConfig, states: Sequence[AgentState], cache: ScoreCache) -> list[np.ndarray]:
    """The evaluated policy's log-probabilities over each logged state's admissible actions."""
    if uses_model(pcfg):
        base: Policy = _Fixed(pcfg.name, [scores_to_log_probs(s, pcfg.temperature) for s in cache.scores(pcfg, states)])
    else:
        base = UniformPolicy(pcfg.name)
    return EpsilonGreedy(base, pcfg.eps if pcfg.kind == "llm" else 0.0, name=pcfg.name).log_distributions(states)


def logged_actions(episodes: Sequence[Episode]) -> list[str]:
    return [s.action for ep in episodes for s in ep.steps]


def same_policy(a: PolicyConfig, b: PolicyConfig) -> bool:
    """Whether two configs sample by the same rule from the same weights (names aside)."""
    strip = lambda p: {k: v for k, v in dataclasses.asdict(p).items() if k != "name"}  # noqa: E731
    return strip(a) == strip(b) and model_fingerprint(a.model) == model_fingerprint(b.model)


def ope_data(
    episodes: Sequence[Episode],
    states: Sequence[AgentState],
    dists: Sequence[np.ndarray],
    gamma: float,
    identical: set[str] = frozenset(),
) -> OPEData:
    """Padded arrays (absorbing padding) with log pi_e - log pi_b of each logged action; NaN where the log
    has no behaviour log-probability. Episodes logged by a policy named in `identical` (the evaluated
    policy itself under another name) get ratio exactly 1, not 1 up to the float noise of batched scoring."""
    n, t_max = len(episodes), max(len(ep.steps) for ep in episodes)
    rewards, log_ratio = np.zeros((n, t_max)), np.zeros((n, t_max))
    mask = np.zeros((n, t_max), dtype=bool)
    k = 0
    for i, ep in enumerate(episodes):
        for t, step in enumerate(ep.steps):
            cands = states[k].admissible
            lp_e = float(dists[k][cands.index(step.action)]) if step.action in cands else float("-inf")
            lp_b = step.behavior_logprob
            rewards[i, t], mask[i, t] = step.reward, True
            if ep.policy in identical:
                log_ratio[i, t] = 0.0
            else:
                log_ratio[i, t] = np.nan if lp_b is None else lp_e - lp_b
            k += 1
    return OPEData(rewards=rewards, mask=mask, log_ratio=log_ratio, gamma=gamma)
