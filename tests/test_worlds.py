"""The text worlds beside the learned simulator: the oracle recovers on-policy values; the log's controls."""

from __future__ import annotations

import numpy as np
import pytest

from adwm.data.schema import Episode, StepRecord
from adwm.envs.base import Reset, Step
from adwm.envs.builtin import BuiltinEnv
from adwm.envs.registry import EnvConfig
from adwm.evaluation.config import GroundTruthConfig
from adwm.evaluation.ground_truth import ground_truth
from adwm.policies.base import UniformPolicy
from adwm.policies.config import PolicyConfig
from adwm.simulation.worlds import (
    LoggedStart,
    LoggedWorld,
    OracleWorld,
    TextState,
    logged_step_starts,
    returns_from_starts,
    rollout_world,
)
from tabular_mdp import random_mdp


class TabularEnv:
    """The tabular MDP of the OPE tests as a text environment: 'state k', actions 'a0', 'a1', ..."""

    name = "tabular"

    def __init__(self, mdp) -> None:
        self.mdp, self.rng, self.s, self.t = mdp, None, 0, 0

    def _actions(self) -> list[str]:
        return [f"a{k}" for k in range(self.mdp.n_actions)]

    def reset(self, seed: int) -> Reset:
        self.rng = np.random.default_rng(seed)
        self.s, self.t = int(self.rng.choice(self.mdp.n_states, p=self.mdp.d0)), 0
        return Reset(f"state {self.s}", "tabular", self._actions())

    def step(self, action: str) -> Step:
        a = int(action[1:])
        reward = float(self.mdp.r[self.s, a])
        nxt = int(self.rng.choice(self.mdp.n_states + 1, p=self.mdp.p[self.s, a]))
        self.t += 1
        done = nxt == self.mdp.n_states or self.t >= self.mdp.horizon
        self.s = min(nxt, self.mdp.n_states - 1)
        return Step(f"state {self.s}", reward, done, None if done else self._actions())

    def gold_actions(self):
        return None

    def close(self) -> None:
        return None


def test_the_oracle_recovers_the_dynamic_programming_value_of_a_tabular_mdp():
    mdp = random_mdp(3)
    pi = np.full((mdp.n_states, mdp.n_actions), 1 / mdp.n_actions)
    starts = [LoggedStart("tabular", "", None, seed) for seed in range(500)]
    returns = rollout_world(OracleWorld(lambda: TabularEnv(mdp)), UniformPolicy("u"), starts, 4000, 10, mdp.gamma, 0)
    se = returns.std(ddof=1) / np.sqrt(len(returns))
    assert abs(returns.mean() - mdp.value(pi)) < 4 * se, (returns.mean(), mdp.value(pi), se)


def test_the_oracle_recovers_the_on_policy_value_on_builtin(tmp_path):
    """Rollouts in the oracle from logged starts (other seeds than ground truth's) against ground truth."""
    env_cfg = EnvConfig(max_steps=8)
    starts = []
    for seed in range(5000, 5100):  # a log's first steps: its episodes' seeds
        r = BuiltinEnv(max_steps=8).reset(seed)
        starts.append(LoggedStart(r.task, r.observation, r.admissible, seed))
    oracle = rollout_world(OracleWorld(lambda: BuiltinEnv(max_steps=8)), UniformPolicy("u"), starts, 300, 8, 0.99, 0)
    gt_cfg = GroundTruthConfig(n_episodes=300, out=str(tmp_path / "gt.json"))
    truth = ground_truth([PolicyConfig(name="u", kind="uniform")], gt_cfg, env_cfg, 0, progress=False)["u"]
    se = np.hypot(oracle.std(ddof=1) / np.sqrt(len(oracle)), truth["se"])
    assert abs(oracle.mean() - truth["J"]) < 3.5 * se, (oracle.mean(), truth["J"], se)
    again = rollout_world(OracleWorld(lambda: BuiltinEnv(max_steps=8)), UniformPolicy("u"), starts, 300, 8, 0.99, 0)
    assert np.array_equal(oracle, again)  # a seed gives the same rollouts


def _toy_log() -> list[Episode]:
    a, b = "You are in the hall. A key lies here.", "You are in the hall. You carry a key."
    one = Episode(
        "builtin",
        1,
        "take the key",
        "p",
        [
            StepRecord(a, "look", 0.0, False, ["look", "take key"]),
            StepRecord(a, "take key", 0.5, False, ["look", "take key"]),
            StepRecord(b, "open door", 1.0, True, ["open door"]),
        ],
        "won",
    )
    return [one]


def test_nearest_takes_the_logged_successor_and_stay_keeps_the_state():
    a, b = "You are in the hall. A key lies here.", "You are in the hall. You carry a key."
    rng = np.random.default_rng(0)
    nearest, stay = LoggedWorld(_toy_log(), moves=True), LoggedWorld(_toy_log(), moves=False)
    s = nearest.start(LoggedStart("take the key", a, ["look", "take key"], 1))
    nxt, r, done = nearest.step(s, "take key", rng)
    assert (nxt.observation, nxt.admissible, r, done) == (b, ["open door"], 0.5, False)
    nxt, r, done = nearest.step(s, "look", rng)
    assert (nxt.observation, r, done) == (a, 0.0, False)
    # an action never taken at this state: the successor of the most similar state where it was
    nxt, r, done = nearest.step(s, "open door", rng)
    assert (nxt.observation, r, done) == ("won", 1.0, True)
    nxt, r, done = nearest.step(s, "dance", rng)  # never logged anywhere: nothing happens
    assert (nxt.observation, r, done) == (a, 0.0, False)
    kept, r, done = stay.step(TextState("take the key", a, ["look", "take key"]), "take key", rng)
    assert (kept.observation, kept.admissible, r, done) == (a, ["look", "take key"], 0.5, False)


def test_nearest_on_a_deterministic_log_replays_the_logged_return():
    """On a log of one deterministic episode, an agent that repeats its actions gets its return back."""
    log = _toy_log()

    class Replay:
        name = "replay"

        def act(self, states, rngs):
            return [log[0].steps[len(s.history)].action for s in states]

    starts = [LoggedStart("take the key", log[0].steps[0].observation, log[0].steps[0].admissible, 1)]
    returns = rollout_world(LoggedWorld(log, True), Replay(), starts, 4, 5, 0.9, 0)
    assert returns == pytest.approx([log[0].discounted_return(0.9)] * 4)


def test_evaluate_in_each_world_by_config(smoke_run, tmp_path, one_thread):
    """`adwm evaluate evaluate.world=...`: the oracle (no world model needed), the controls, the learned
    model picking among the analogy world's proposals and the token-by-token baseline on one family; the oracle agrees with the ground truth of the smoke run's uniform agent."""
    from adwm.cli import main
    from adwm.runtime.atomic import read_json
    from helpers import reads

    family = ["family.eps=[0.0,1.0]", "family.off_path=[]", "evaluate.calibration=none", "workers=1"]
    rollouts = ["evaluate.simulate.n_rollouts=200", "evaluate.simulate.horizon=0"]
    results = {}
    for world in ("oracle", "nearest", "stay", "analogy", "guided_analogy", "autoregressive"):
        out = tmp_path / f"{world}.json"
        args = ["evaluate", *reads(smoke_run), *family, *rollouts, f"evaluate.world={world}", f"evaluate.out={out}"]
        args.append(f"evaluate.autoregressive.out={tmp_path / 'autoregressive'}")  # trained here, not in the run
        if world == "oracle":  # reads no world model: a missing one does not matter
            args.append(f"evaluate.world_model={tmp_path / 'none.ckpt'}")
            args.append(f"project.world_model={tmp_path / 'none.ckpt'}")
        assert main(args) == 0
        results[world] = read_json(out)
        for name in ("iter3_eps0", "iter3_eps1"):
            e = results[world]["estimates"][name]
            assert e["settings"]["world"] == world and e["n"] == 200 and np.isfinite(e["J_hat"])
            # a reader's change reuses it; the learned model picking among proposals reads the guidance
            read = {"guidance"} if world == "guided_analogy" else set()
            assert {"guidance", "ablation", "projector"} & set(e["settings"]) == read
    truth = read_json(smoke_run / "ground_truth" / "ground_truth.json")["iter3_eps1"]
    oracle = results["oracle"]["estimates"]["iter3_eps1"]
    half = (oracle["ci"][1] - oracle["ci"][0]) / 2
    assert abs(oracle["J_hat"] - truth["J"]) < 2 * half + 4 * truth["se"]


def test_a_cut_at_the_step_limit_is_not_an_end_in_the_worlds_built_from_the_log():
    """A logged episode cut at the step limit (`info.truncated`) has `done` on its last step; the text worlds
    must not end a rollout that takes that step, or they end rollouts wherever a failing episode ran out of
    steps. The same step in an episode that really ended does end them."""
    from adwm.simulation.analogy import AnalogyWorld

    here = "You are in the hall. You carry nothing."
    looked = f"You look around. {here}"

    def episode(seed: int, truncated: bool) -> Episode:
        steps = [StepRecord(here, "look", 0.0, True, ["look"])]
        return Episode("builtin", seed, "Find the key.", "p", steps, looked, info={"truncated": truncated})

    cut, end = episode(1, True), episode(2, False)
    assert not cut.ended(0) and end.ended(0)
    rng = np.random.default_rng(0)
    for world in (LoggedWorld([cut], moves=True), AnalogyWorld([cut])):
        state = world.start(LoggedStart("Find the key.", here, ["look"], 1))
        assert world.step(state, "look", rng)[2] is False
    for world in (LoggedWorld([end], moves=True), AnalogyWorld([end])):
        state = world.start(LoggedStart("Find the key.", here, ["look"], 2))
        assert world.step(state, "look", rng)[2] is True


def test_a_world_is_built_once_a_process_per_log_and_settings(smoke_run, monkeypatch):
    """A worker simulating several policies builds its world (for `analogy`, the analogy world of the log's
    training split) once; other world settings, or the log written again, build it anew (its rollouts keep
    their own state, so sharing is safe: test_guided_analogy.py and the evaluate tests check the estimates)."""
    import os
    from pathlib import Path

    from adwm.config import load_config
    from adwm.simulation.registry import AnalogyTextWorld, NearestWorld
    from adwm.stages import evaluate as evaluate_stage
    from helpers import reads

    monkeypatch.setattr(evaluate_stage, "_LOADED", {})
    cfg = load_config([*reads(smoke_run), "evaluate.world=analogy"], "evaluate")
    log = Path(cfg.data.log)
    first = evaluate_stage.loaded_world(cfg, log)
    assert isinstance(first, AnalogyTextWorld) and evaluate_stage.loaded_world(cfg, log) is first
    nearest = load_config([*reads(smoke_run), "evaluate.world=nearest"], "evaluate")
    assert isinstance(evaluate_stage.loaded_world(nearest, log), NearestWorld)
    again = evaluate_stage.loaded_world(cfg, log)
    assert again is not first
    stat = log.stat()
    try:
        os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the log written again
        assert evaluate_stage.loaded_world(cfg, log) is not again
    finally:
        os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_every_world_of_the_config_has_a_class_and_an_unknown_one_is_named():
    from adwm.simulation.config import WORLDS
    from adwm.simulation.registry import WORLD_CLASSES, world_class

    assert set(WORLD_CLASSES) == set(WORLDS)
    assert all(world_class(name).name == name for name in WORLDS)
    with pytest.raises(ValueError, match=r"evaluate.world: unknown world 'dream'; choose from \['diffusion'"):
        world_class("dream")


def test_returns_from_a_later_logged_step_take_the_given_action_first_within_the_steps_left():
    """From each logged step (with the turns before it as history), the logged action first: on a
    deterministic log, the logged return-to-go; V with the agent acting, and a budget of one step."""
    log = _toy_log()
    starts = logged_step_starts(log)
    assert [len(s.history) for s in starts] == [0, 1, 2] and starts[2].history[1] == (
        log[0].steps[1].observation,
        "take key",
    )

    class Replay:
        name = "replay"

        def act(self, states, rngs):
            return [log[0].steps[len(s.history)].action for s in states]

    first = [s.action for s in log[0].steps]
    q = returns_from_starts(LoggedWorld(log, True), Replay(), starts, first, np.full(3, 5), 0.9, 0)
    assert q == pytest.approx([0.9 * 0.5 + 0.81 * 1.0, 0.5 + 0.9 * 1.0, 1.0])
    # "look" first, then the agent (which reads the history it was given: one turn more than the log had)
    looked = returns_from_starts(LoggedWorld(log, True), Replay(), starts[1:2], ["look"], np.array([5]), 0.9, 0)
    assert looked == pytest.approx([0.9 * 1.0])  # at turn 2 the agent plays the logged turn-2 action, "open door"
    one = returns_from_starts(LoggedWorld(log, True), Replay(), starts[:2], [None, None], np.array([1, 1]), 0.9, 0)
    assert one == pytest.approx([0.0, 0.5])  # a budget of one step: its reward alone


def test_the_oracle_replays_the_logged_turns_and_its_q_returns_are_the_dp_values():
    mdp = random_mdp(3)
    q_table = mdp.q_values(np.full((mdp.n_states, mdp.n_actions), 1 / mdp.n_actions))
    starts, expected = [], []
    for seed in range(1500):  # a logged step at turn 1 of each episode, after the logged action a0
        env = TabularEnv(mdp)
        r = env.reset(seed)
        s = env.step("a0")
        if s.done:
            continue
        starts.append(LoggedStart("tabular", s.observation, s.admissible, seed, [(r.observation, "a0")]))
        expected.append(q_table[1, env.s, 1])
    world = OracleWorld(lambda: TabularEnv(mdp))
    state = world.start(starts[0])
    assert state.observation == starts[0].observation and state.history == starts[0].history
    world.close()
    n = len(starts)
    returns = returns_from_starts(world, UniformPolicy("u"), starts, ["a1"] * n, np.full(n, 10), mdp.gamma, 0)
    gap = returns - np.array(expected)
    assert abs(gap.mean()) < 4 * gap.std(ddof=1) / np.sqrt(n), gap.mean()
