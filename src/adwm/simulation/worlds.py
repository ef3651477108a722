"""Worlds of text states beside the learned latent simulator: the oracle and two controls built from the log.

`evaluate.world` picks what the evaluated agent is rolled out in:

* `diffusion`: the learned world model (simulation/simulate.py): the agent reads latents;
* `oracle`: the real environment, reset to each logged start's seed. The estimator's machinery (starts,
  horizon, discounting, the agent's sampling rule) with a perfect model: it must recover the on-policy
  value within Monte Carlo error, the floor every learned model is judged against;
* `nearest`: certainty-equivalence on the log: at a logged observation, the successor (next observation,
  reward, done) of a logged transition with the same action from it, drawn uniformly among them; where
  the action was never taken there, the transition of the most similar logged observation (word TF-IDF
  cosine) where it was; an action never logged leaves the state as it is, reward 0;
* `stay`: the same reward and termination draw as `nearest`, but the next state is the current one.

The text worlds share one rollout loop (`rollout_world`): the agent is the real policy (the one sampling
rule, eps mixture and temperature of ground truth), acting on every live rollout in one batched call.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from adwm.data.schema import Episode
from adwm.envs.base import TextEnv
from adwm.policies.base import AgentState, Policy


@dataclass
class LoggedStart:
    """A logged step a rollout starts from: an episode's first, or any later one with the logged turns before
    it (`history`: (observation, action) pairs; the oracle replays their actions)."""

    task: str
    observation: str
    admissible: list[str] | None
    seed: int  # the environment seed of the logged episode (the oracle resets to it)
    history: list[tuple[str, str]] = field(default_factory=list)


def logged_episode_starts(episodes: Sequence[Episode]) -> list[LoggedStart]:
    if not episodes:
        raise ValueError("no logged episode to start rollouts from")
    return [LoggedStart(ep.task, ep.steps[0].observation, ep.steps[0].admissible, ep.seed) for ep in episodes]


def logged_step_starts(episodes: Sequence[Episode]) -> list[LoggedStart]:
    """Every logged step as a start, episode-major, with the logged turns before it."""
    out = []
    for ep in episodes:
        history: list[tuple[str, str]] = []
        for step in ep.steps:
            out.append(LoggedStart(ep.task, step.observation, step.admissible, ep.seed, list(history)))
            history.append((step.observation, step.action))
    return out


@dataclass
class TextState:
    task: str
    observation: str
    admissible: list[str] | None
    history: list[tuple[str, str]] = field(default_factory=list)
    handle: Any = None  # the world's own: a live environment (oracle)


class TextWorld(Protocol):
    def start(self, start: LoggedStart) -> TextState: ...

    def step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        """The next state, the reward and whether the episode ended."""

    def close(self) -> None: ...


class OracleWorld:
    """The real environment: one instance per live rollout, reset to the logged start's seed."""

    def __init__(self, make_env: Callable[[], TextEnv]) -> None:
        self.make_env, self.free, self.made = make_env, [], []

    def start(self, start: LoggedStart) -> TextState:
        if not self.free:
            self.made.append(self.make_env())
            self.free.append(self.made[-1])
        env = self.free.pop()
        r = env.reset(start.seed)
        for k, (_, action) in enumerate(start.history):  # a later logged step: its logged actions replayed
            r = env.step(action)
            if r.done and k + 1 < len(start.history):
                raise ValueError(
                    f"oracle: replaying the logged actions of the episode of seed {start.seed} ended it at turn "
                    f"{k}, before the logged step {len(start.history)} (is the environment deterministic?)"
                )
        adm = None if r.admissible is None else list(r.admissible)
        return TextState(start.task if start.history else r.task, r.observation, adm, list(start.history), env)

    def step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        s = state.handle.step(action)
        if s.done:
            self.free.append(state.handle)
        adm = None if s.admissible is None else list(s.admissible)
        history = [*state.history, (state.observation, action)]
        return TextState(state.task, s.observation, adm, history, state.handle), float(s.reward), bool(s.done)

    def close(self) -> None:
        for env in self.made:
            env.close()
        self.free, self.made = [], []


_WORD = re.compile(r"[a-z0-9]+")


@dataclass
class _Transition:
    next_observation: str
    next_admissible: list[str] | None
    reward: float
    done: bool


class LoggedWorld:
    """`nearest` (`moves=True`) and `stay` (`moves=False`) from the logged transitions."""

    def __init__(self, episodes: Sequence[Episode], moves: bool) -> None:
        self.moves = moves
        self.table: dict[str, dict[str, list[_Transition]]] = defaultdict(lambda: defaultdict(list))
        self.admissible: dict[str, list[str] | None] = {}
        for ep in episodes:
            for t, s in enumerate(ep.steps):
                last = t + 1 == len(ep.steps)
                nxt_obs = ep.final_observation if last else ep.steps[t + 1].observation
                nxt_adm = None if last else ep.steps[t + 1].admissible
                self.table[s.observation][s.action].append(_Transition(nxt_obs, nxt_adm, float(s.reward), ep.ended(t)))
                self.admissible.setdefault(s.observation, s.admissible)
                if not last:
                    self.admissible.setdefault(nxt_obs, nxt_adm)
        self.states = list(self.table)
        self._tfidf = _TfIdf(self.states)
        self._vectors = self._tfidf(self.states)
        self._row = {o: i for i, o in enumerate(self.states)}
        self._taken: dict[str, list[int]] = defaultdict(list)  # action -> rows of the states it was taken at
        for o in self.states:
            for action in self.table[o]:
                self._taken[action].append(self._row[o])

    def start(self, start: LoggedStart) -> TextState:
        return TextState(start.task, start.observation, start.admissible)

    def _similar(self, observation: str, action: str) -> str | None:
        """The logged observation most similar to `observation` where `action` was taken."""
        rows = self._taken.get(action)
        if not rows:
            return None
        if observation in self._row:
            q = self._vectors[self._row[observation]]
        else:
            q = self._tfidf([observation])[0]
        return self.states[rows[int(np.argmax(self._vectors[rows] @ q))]]

    def step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        options = self._logged_outcomes(state, action)
        if options is None:  # never logged: nothing happens
            return self._unchanged(state, action), 0.0, False
        return options[int(rng.integers(len(options)))]

    def outcomes(self, state: TextState, action: str) -> list[tuple[TextState, float, bool]]:
        """Each outcome `step` draws from, equally likely: (next state, reward, end)."""
        options = self._logged_outcomes(state, action)
        return [(self._unchanged(state, action), 0.0, False)] if options is None else options

    @staticmethod
    def _unchanged(state: TextState, action: str) -> TextState:
        return TextState(state.task, state.observation, state.admissible, [*state.history, (state.observation, action)])

    def _logged_outcomes(self, state: TextState, action: str) -> list[tuple[TextState, float, bool]] | None:
        """The logged transitions by `action` from `state` (or from the most similar logged state where it
        was taken), as outcomes; None where the action was never logged."""
        source = state.observation if action in self.table.get(state.observation, {}) else None
        source = source or self._similar(state.observation, action)
        if source is None:
            return None
        out = []
        for tr in self.table[source][action]:
            if not self.moves:
                out.append((self._unchanged(state, action), tr.reward, tr.done))
                continue
            adm = tr.next_admissible if tr.next_admissible is not None else self.admissible.get(tr.next_observation)
            if adm is None:  # a state the log showed only at an episode's end (a cut): the list it had before
                adm = state.admissible
            history = [*state.history, (state.observation, action)]
            out.append((TextState(state.task, tr.next_observation, adm, history), tr.reward, tr.done))
        return out

    def close(self) -> None:
        return None


class _TfIdf:
    """Word TF-IDF with the vocabulary and IDF of a corpus of texts; vectors are L2-normalised."""

    def __init__(self, corpus: Sequence[str]) -> None:
        self.vocab: dict[str, int] = {}
        for text in corpus:
            for w in _WORD.findall(text.lower()):
                self.vocab.setdefault(w, len(self.vocab))
        df = np.zeros(len(self.vocab))
        for text in corpus:
            for w in set(_WORD.findall(text.lower())):
                df[self.vocab[w]] += 1
        self.idf = np.log((1 + len(corpus)) / (1 + df)) + 1

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(N, |vocab|) vectors of `texts`; words outside the corpus are left out."""
        out = np.zeros((len(texts), len(self.vocab)))
        for i, text in enumerate(texts):
            for w in _WORD.findall(text.lower()):
                if w in self.vocab:
                    out[i, self.vocab[w]] += 1
        out *= self.idf
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def drawn_starts(n_starts: int, n_rollouts: int, seed: int) -> tuple[np.ndarray, list[np.random.Generator]]:
    """Which start each rollout begins from (drawn with replacement, as `simulate` draws them) and one numpy
    generator a rollout for its actions and the world's choices."""
    pick = np.random.default_rng(seed).integers(0, n_starts, size=n_rollouts)
    return pick, [np.random.default_rng((seed, 11, k)) for k in range(n_rollouts)]


def rollout_world(
    world: TextWorld,
    policy: Policy,
    starts: Sequence[LoggedStart],
    n_rollouts: int,
    horizon: int,
    gamma: float,
    seed: int,
    step: Callable[[int], object] = lambda n: None,
) -> np.ndarray:
    """Discounted returns (n_rollouts,) of `policy` in `world` from logged starts drawn with replacement
    (the draw of `simulate`'s); one numpy generator a rollout draws its actions and the world's choices."""
    pick, rngs = drawn_starts(len(starts), n_rollouts, seed)
    steps = np.full(n_rollouts, horizon)
    return run_rollouts(world, policy, [starts[i] for i in pick], rngs, steps, gamma, None, step)


def returns_from_starts(
    world: TextWorld,
    policy: Policy,
    starts: Sequence[LoggedStart],
    first: Sequence[str | None] | None,
    steps: np.ndarray,
    gamma: float,
    seed: int,
) -> np.ndarray:
    """One discounted return per start, in order (a start at a later logged step: discounted from that
    step), of at most `steps[k]` steps; where `first[k]` is an action, the rollout takes it first and the
    policy acts from the next step on (a return of Q(s, a) rather than V(s))."""
    rngs = [np.random.default_rng((seed, 13, k)) for k in range(len(starts))]
    return run_rollouts(world, policy, starts, rngs, np.asarray(steps), gamma, first)


def keep_logged_turns(states: Sequence[TextState], starts: Sequence[LoggedStart]) -> None:
    """Each state gets its start's logged turns as the history its agent reads, where the world kept none."""
    for state, s in zip(states, starts):
        if s.history and not state.history:
            state.history = list(s.history)


def act_or_given(
    policy: Policy,
    states: Sequence[TextState],
    live: Sequence[int],
    rngs: Sequence[np.random.Generator],
    given: Sequence[str | None] | None,
) -> list[str]:
    """The action of each live rollout: `given[i]` where it is an action, else the policy's draw (it reads
    only the states it acts in)."""
    forced = {i: given[i] for i in live if given[i] is not None} if given is not None else {}
    free = [i for i in live if i not in forced]
    seen = [AgentState(states[i].task, states[i].observation, states[i].history, states[i].admissible) for i in free]
    acted = iter(policy.act(seen, [rngs[i] for i in free]) if free else [])
    return [forced[i] if i in forced else next(acted) for i in live]


def run_rollouts(
    world: TextWorld,
    policy: Policy,
    starts: Sequence[LoggedStart],
    rngs: Sequence[np.random.Generator],
    steps: np.ndarray,
    gamma: float,
    first: Sequence[str | None] | None = None,
    step: Callable[[int], object] = lambda n: None,
) -> np.ndarray:
    """The rollout loop of the text worlds: one rollout per start, the k-th of at most `steps[k]` steps,
    its first action `first[k]` where given; the agent reads each start's logged turns as its history."""
    n = len(starts)
    batched = hasattr(world, "step_batch")  # a world that advances every live rollout in one pass
    states = world.start_batch(list(starts)) if batched else [world.start(s) for s in starts]
    keep_logged_turns(states, starts)
    alive = np.ones(n, dtype=bool)
    returns = np.zeros(n)
    try:
        for t in range(int(steps.max(initial=0))):
            live = np.flatnonzero(alive).tolist()
            actions = act_or_given(policy, states, live, rngs, first if t == 0 else None)
            if batched:
                outcomes = world.step_batch([states[i] for i in live], actions, [rngs[i] for i in live])
            else:
                outcomes = [world.step(states[i], a, rngs[i]) for i, a in zip(live, actions)]
            for i, (state, reward, done) in zip(live, outcomes):
                states[i] = state
                returns[i] += gamma**t * reward
                alive[i] = not done and t + 1 < steps[i]
            step(1)
            if not alive.any():
                break
    finally:
        world.close()
    return returns
