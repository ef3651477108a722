"""Logged episodes -> OPE inputs: agent states, the evaluated policy's exact distributions, padded arrays.

The evaluated policy's probabilities of the logged actions use its own sampling
rule: the agent's summed log-likelihood scores of the admissible actions, its
temperature, then the exact epsilon mixture `(1 - eps) pi + eps / |A(s)|`.
Scores depend only on the checkpoint and the prompt, so one pass over the log
serves a whole epsilon family; they are cached on disk per checkpoint.

A writing agent (`mode: generate`) is not a distribution over the list: its
probability of a logged action is the probability of writing that text at its
temperature, mixed exactly with the uniform branch,
`(1 - eps) p_gen(a) + eps 1[a in A(s)] / |A(s)|`; expectations under it (the
action-value baselines) use K actions it writes per logged state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adwm.data.schema import Episode
from adwm.ope.base import OPEData
from adwm.policies.base import AgentState, Policy, UniformPolicy
from adwm.policies.config import PolicyConfig
from adwm.policies.llm import LLMPolicy
from adwm.policies.loading import model_fingerprint
from adwm.policies.prompt import render_prompt
from adwm.policies.sampling import log_probs_np, uses_model
from adwm.policies.wrappers import EpsilonGreedy, eps_mixture
from adwm.runtime.atomic import atomic_write_bytes


def logged_states(episodes: Sequence[Episode]) -> list[AgentState]:
    """Every logged step as the agent saw it (task, observation, past turns, admissible list), episode-major."""
    out = []
    for ep in episodes:
        history: list[tuple[str, str]] = []
        for step in ep.steps:
            out.append(AgentState(ep.task, step.observation, list(history), step.admissible))
            history.append((step.observation, step.action))
    return out


def require_candidates(states: Sequence[AgentState], log: str, policy: str = "") -> None:
    for k, s in enumerate(states):
        if not s.admissible:
            who = f" of policy '{policy}'" if policy else ""
            raise ValueError(
                f"{log}: logged step {k} has no admissible action list; the baselines need the candidate "
                f"actions to compute the evaluated policy's probabilities{who} (a policy that chooses from "
                "the list or mixes in a uniform choice from it; log the lists, e.g. with "
                "env.scienceworld.log_admissible_rate=1)"
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
    """The agents' per-state outputs on the logged states (scores of the admissible actions, log-probs of
    writing the logged action, written samples), cached on disk per checkpoint, prompt and log."""

    def __init__(self, folder: Path | None, log_id: str) -> None:
        self.folder, self.log_id, self.memory = folder, log_id, {}

    def key(self, pcfg: PolicyConfig, **extra) -> str:
        prompt = {k: getattr(pcfg, k) for k in ("model", "tokenizer", "gguf_file", "prompt_template", "history_turns")}
        prompt |= {"action_suffix": pcfg.action_suffix, "weights": model_fingerprint(pcfg.model), "log": self.log_id}
        return hashlib.sha1(json.dumps(prompt | extra, sort_keys=True).encode()).hexdigest()[:16]

    def ragged(self, name: str, compute) -> list[np.ndarray]:
        """Per-state float arrays, computed once per `name` (a cache key) and kept in an .npz file."""
        if name in self.memory:
            return self.memory[name]
        path = self.folder / f"{name}.npz" if self.folder is not None else None
        if path is not None and path.is_file():
            with np.load(path) as z:
                flat, bounds = z["flat"], z["bounds"]
        else:
            per_state = compute()
            flat = np.concatenate(per_state) if per_state else np.zeros(0)
            bounds = np.cumsum([0] + [len(s) for s in per_state])
            if path is not None:
                buf = io.BytesIO()
                np.savez(buf, flat=flat, bounds=bounds)
                atomic_write_bytes(path, buf.getvalue())
        out = [flat[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        self.memory[name] = out
        return out

    def scores(self, pcfg: PolicyConfig, states: Sequence[AgentState]) -> list[np.ndarray]:
        """Summed log-likelihood (T = 1) of each state's admissible actions."""

        def compute() -> list[np.ndarray]:
            base = dataclasses.replace(pcfg, eps=0.0, temperature=1.0, mode="score")
            # logs revisit states: score each distinct (prompt, candidates) once
            keys = [(render_prompt(pcfg.prompt_template, s, pcfg.history_turns), tuple(s.admissible)) for s in states]
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            unique = list(first)
            scored = LLMPolicy(base, f"policy '{pcfg.name}'").action_scores([states[first[k]] for k in unique])
            by_key = dict(zip(unique, scored))
            return [by_key[k] for k in keys]

        return self.ragged(f"scores_{self.key(pcfg)}", compute)

    def written(self, pcfg: PolicyConfig, states: Sequence[AgentState], actions: Sequence[str]) -> np.ndarray:
        """log p_gen(a_k | s_k): the writing agent's probability (at its temperature) of each logged action."""

        def compute() -> list[np.ndarray]:
            base = dataclasses.replace(pcfg, eps=0.0, mode="generate")
            return list(LLMPolicy(base, f"policy '{pcfg.name}'").generation_log_probs(states, actions)[:, None])

        key = self.key(pcfg, temperature=pcfg.temperature, kind="written")
        return np.concatenate(self.ragged(f"written_{key}", compute))

    def samples(self, pcfg: PolicyConfig, states: Sequence[AgentState], k: int, seed: int) -> list[list[str]]:
        """k actions the writing agent (at its temperature, no eps) writes in each state, reproducible per seed.
        On disk, each batch's writes are appended to a `.partial.jsonl` file as it ends (a long ScienceWorld
        log takes minutes a checkpoint), so a killed run resumes at the first batch it had not finished."""
        key = self.key(pcfg, temperature=pcfg.temperature, k=k, seed=seed, kind="samples")
        if key in self.memory:
            return self.memory[key]
        path = self.folder / f"samples_{key}.json" if self.folder is not None else None
        if path is not None and path.is_file():
            out = json.loads(path.read_text())
        else:
            partial = path.with_suffix(".partial.jsonl") if path is not None else None
            flat = _finished_batches(partial)
            policy = LLMPolicy(dataclasses.replace(pcfg, eps=0.0, mode="generate"), f"policy '{pcfg.name}'")
            rows = [s for s in states for _ in range(k)]
            step = pcfg.batch_states
            for lo in range(len(flat), len(rows), step):
                rngs = [np.random.default_rng([seed, r // k, r % k]) for r in range(lo, min(lo + step, len(rows)))]
                written = policy.act(rows[lo : lo + step], rngs)
                flat += written
                if partial is not None:
                    with open(partial, "a") as f:
                        f.write(json.dumps(written) + "\n")
                        f.flush()
            out = [flat[i * k : (i + 1) * k] for i in range(len(states))]
            if path is not None:
                atomic_write_bytes(path, json.dumps(out).encode())
                partial.unlink(missing_ok=True)
        self.memory[key] = out
        return out


def _finished_batches(partial: Path | None) -> list[str]:
    """The writes of the batches a killed run finished; a last line cut short is dropped from the file."""
    if partial is None or not partial.is_file():
        return []
    flat: list[str] = []
    lines = partial.read_text().splitlines(keepends=True)
    for n, line in enumerate(lines):
        try:
            flat += json.loads(line)
        except json.JSONDecodeError:
            atomic_write_bytes(partial, "".join(lines[:n]).encode())
            break
    return flat


def writes(pcfg: PolicyConfig) -> bool:
    """Whether the evaluated policy writes its actions (generate mode) rather than choosing from the list."""
    return pcfg.kind == "llm" and pcfg.mode == "generate" and uses_model(pcfg)


def writing_log_probs(
    pcfg: PolicyConfig, states: Sequence[AgentState], actions: Sequence[str], cache: ScoreCache
) -> np.ndarray:
    """log pi_e(a_k | s_k) of each logged action for a writing policy, with its exact eps mixture
    (1 - eps) p_gen(a) + eps 1[a in A(s)] / |A(s)|; the uniform branch needs each logged list."""
    return eps_mixture(cache.written(pcfg, states, actions), states, actions, pcfg.eps)


def policy_distributions(pcfg: PolicyConfig, states: Sequence[AgentState], cache: ScoreCache) -> list[np.ndarray]:
    """The evaluated policy's log-probabilities over each logged state's admissible actions."""
    if uses_model(pcfg):
        base: Policy = _Fixed(pcfg.name, [log_probs_np(s, pcfg.temperature) for s in cache.scores(pcfg, states)])
    else:
        base = UniformPolicy(pcfg.name)
    return EpsilonGreedy(base, pcfg.eps if pcfg.kind == "llm" else 0.0, name=pcfg.name).log_distributions(states)


def logged_actions(episodes: Sequence[Episode]) -> list[str]:
    return [s.action for ep in episodes for s in ep.steps]


def same_policy(a: PolicyConfig, b: PolicyConfig) -> bool:
    """Whether two configs sample by the same rule from the same weights (names aside)."""
    strip = lambda p: {k: v for k, v in dataclasses.asdict(p).items() if k != "name"}  # noqa: E731
    return strip(a) == strip(b) and model_fingerprint(a.model) == model_fingerprint(b.model)


def chosen_log_probs(states: Sequence[AgentState], actions: Sequence[str], dists: Sequence[np.ndarray]) -> np.ndarray:
    """log pi_e(a_k | s_k) read off per-state distributions over the admissible lists (-inf off the list)."""
    return np.array(
        [float(d[s.admissible.index(a)]) if a in s.admissible else -np.inf for s, a, d in zip(states, actions, dists)]
    )


def ope_data(
    episodes: Sequence[Episode],
    log_pi: np.ndarray,
    gamma: float,
    identical: set[str] = frozenset(),
    behaviour: np.ndarray | None = None,
) -> OPEData:
    """Padded arrays (absorbing padding) with log pi_e - log pi_b of each logged action (`log_pi`, flat in
    episode-major step order); NaN where the log has no behaviour log-probability. Episodes logged by a
    policy named in `identical` (the evaluated policy itself under another name) get ratio exactly 1, not
    1 up to the float noise of batched scoring. `behaviour` (flat, like `log_pi`): estimated behaviour
    log-probabilities used instead of the logged ones, for every step (`identical` is then not read)."""
    n, t_max = len(episodes), max(len(ep.steps) for ep in episodes)
    rewards, log_ratio = np.zeros((n, t_max)), np.zeros((n, t_max))
    mask = np.zeros((n, t_max), dtype=bool)
    k = 0
    for i, ep in enumerate(episodes):
        for t, step in enumerate(ep.steps):
            lp_b = step.behavior_logprob if behaviour is None else float(behaviour[k])
            rewards[i, t], mask[i, t] = step.reward, True
            if behaviour is None and ep.policy in identical:
                log_ratio[i, t] = 0.0
            else:
                log_ratio[i, t] = np.nan if lp_b is None else float(log_pi[k]) - lp_b
            k += 1
    return OPEData(rewards=rewards, mask=mask, log_ratio=log_ratio, gamma=gamma)
