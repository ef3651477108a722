"""Run policies in real environments, many episodes in lock-step so model calls are batched.

Every episode owns its environment seed and its numpy generator, so what an
episode does does not depend on which other episodes share its batch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from adwm.data.schema import Episode, StepRecord
from adwm.envs.base import EnvCrashed, TextEnv, logged_admissible
from adwm.policies.base import AgentState, Policy, sample_index
from adwm.runtime import costs


@dataclass
class EpisodeJob:
    index: int  # position in the run (episode id in logs)
    env_seed: int
    rng_seed: tuple[int, ...]  # seeds the episode's action sampling
    policy: str  # key into the policies mapping


@dataclass
class _Slot:
    job: EpisodeJob
    env: TextEnv
    rng: np.random.Generator
    state: AgentState
    steps: list[StepRecord]


def _choose(policy: Policy, states: list[AgentState], rngs: list[np.random.Generator], record: bool):
    """Actions, and their behaviour log-probs when `record` (one model call either way)."""
    if record and not any(policy.generates(s) for s in states) and all(s.admissible for s in states):
        dists = policy.log_distributions(states)
        idx = [sample_index(d, r) for d, r in zip(dists, rngs)]
        return [s.admissible[i] for s, i in zip(states, idx)], [float(d[i]) for d, i in zip(dists, idx)]
    actions = policy.act(states, rngs)
    return actions, policy.log_probs(states, actions) if record else [None] * len(states)


def run_episodes(
    make_env: Callable[[], TextEnv],
    policies: dict[str, Policy],
    jobs: Sequence[EpisodeJob],
    on_episode: Callable[[Episode], None],
    n_envs: int = 64,
    record_logprob: bool = False,
    max_retries: int = 3,
) -> None:
    """Play every job to the end, calling `on_episode` as each one finishes. An episode whose environment
    crashed (`EnvCrashed`) is replayed from scratch with the same seeds, at most `max_retries` times; its
    partial steps are dropped, so logs only ever hold whole episodes."""
    pending = list(jobs)[::-1]
    retries: dict[tuple[str, int], int] = {}
    envs = [make_env() for _ in range(min(n_envs, len(pending)))]

    def start(env: TextEnv) -> _Slot | None:
        if not pending:
            return None
        job = pending.pop()
        for attempt in range(max_retries + 1):
            try:
                with costs.section("online/env"):
                    reset = env.reset(job.env_seed)
                break
            except EnvCrashed as err:
                if attempt == max_retries:
                    raise RuntimeError(f"episode {job.index} (env seed {job.env_seed}): {err}") from err
                warnings.warn(f"episode {job.index}: {err}; resetting it again", stacklevel=2)
        state = AgentState(reset.task, reset.observation, [], reset.admissible)
        return _Slot(job, env, np.random.default_rng(list(job.rng_seed)), state, [])

    slots: list[_Slot | None] = [start(e) for e in envs]
    try:
        while any(slots):
            for name, policy in policies.items():
                active = [i for i, s in enumerate(slots) if s is not None and s.job.policy == name]
                if not active:
                    continue
                states = [slots[i].state for i in active]
                with costs.section("online/agent"):
                    actions, logps = _choose(policy, states, [slots[i].rng for i in active], record_logprob)
                costs.count("online/steps", len(active))
                for i, action, logp in zip(active, actions, logps):
                    slot = slots[i]
                    try:
                        with costs.section("online/env"):
                            step = slot.env.step(action)
                    except EnvCrashed as err:  # the backend was restarted: replay the episode from its reset
                        key = (slot.job.policy, slot.job.index)
                        retries[key] = retries.get(key, 0) + 1
                        if retries[key] > max_retries:
                            raise RuntimeError(
                                f"episode {slot.job.index} (env seed {slot.job.env_seed}): {err}"
                            ) from err
                        warnings.warn(f"episode {slot.job.index}: {err}; replaying it", stacklevel=2)
                        pending.append(slot.job)
                        slots[i] = start(slot.env)
                        continue
                    adm = logged_admissible(slot.state.admissible)
                    slot.steps.append(StepRecord(slot.state.observation, action, step.reward, step.done, adm, logp))
                    if step.done:
                        on_episode(
                            Episode(
                                slot.env.name,
                                slot.job.env_seed,
                                slot.state.task,
                                name,
                                slot.steps,
                                step.observation,
                                slot.job.index,
                                dict(step.info),
                            )
                        )
                        slots[i] = start(slot.env)
                    else:
                        history = [*slot.state.history, (slot.state.observation, action)]
                        slot.state = AgentState(slot.state.task, step.observation, history, step.admissible)
    finally:
        for e in envs:
            e.close()
