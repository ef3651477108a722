"""ScienceWorld adapter on the real simulator (a JVM per adapter): episodes, rewards, on-demand valid
lists, gold cache, and replay after a forced JVM crash."""

from __future__ import annotations

import gc
import json
import shutil
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from omegaconf import OmegaConf

from adwm.data.play import EpisodeJob, run_episodes
from adwm.data.schema import read_episodes
from adwm.envs import EnvConfig, make_env
from adwm.envs.base import OnDemandActions
from adwm.policies.base import AgentState, Policy
from adwm.policies.config import PolicyConfig
from adwm.stages.collect import collect
from adwm.stages.config import BehaviourEntry, CollectConfig

pytest.importorskip("scienceworld")
if shutil.which("java") is None:  # .ci/run installs a JRE; a bare machine skips with the reason
    pytest.skip("ScienceWorld needs a Java runtime (`java` not on PATH)", allow_module_level=True)

from adwm.envs.scienceworld import ScienceWorldConfig, ScienceWorldEnv, scienceworld_state_key  # noqa: E402

TASK = "find-living-thing"  # gold path of ~10 steps


@pytest.fixture(scope="module")
def gold_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sw_gold")


@pytest.fixture(scope="module")
def env(gold_dir):
    e = ScienceWorldEnv(ScienceWorldConfig(tasks=[TASK], gold_cache=str(gold_dir)), max_steps=40)
    yield e
    e.close()


class Script(Policy):
    """Writes the actions of a fixed script (generate mode: never reads the admissible list)."""

    def __init__(self, actions: list[str], name: str = "script") -> None:
        self.actions, self.name = actions, name

    def generates(self, state: AgentState) -> bool:
        return True

    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        raise NotImplementedError

    def act(self, states, rngs) -> list[str]:
        return [self.actions[min(len(s.history), len(self.actions) - 1)] for s in states]

    def log_probs(self, states, actions) -> list[float]:
        return [0.0] * len(states)


def test_gold_episode_scores_one_and_rewards_are_score_changes(env, gold_dir):
    reset = env.reset(0)
    assert reset.info["task_name"] == TASK and "living thing" in reset.task
    assert "This room is called" in reset.observation
    assert scienceworld_state_key(reset.observation)  # fidelity's key: the room
    assert isinstance(reset.admissible, OnDemandActions) and reset.admissible.fetched  # the first is always logged
    gold = env.gold_actions()
    assert gold and json.loads(next(gold_dir.glob(f"{TASK}-*.json")).read_text())["actions"] == gold
    total, steps = 0.0, []  # generating the gold path reloaded the simulator; the episode was put back
    for action in gold:
        step = env.step(action)
        steps.append(step)
        total += step.reward
        assert env.gold_actions() == gold[len(steps) :] or step.done
    assert steps[-1].done and steps[-1].info["won"] and not steps[-1].info["truncated"]
    assert total == pytest.approx(1.0)  # score 0 -> 100, reward = change / 100
    assert all(-1.0 <= s.reward <= 1.0 for s in steps)
    assert steps[-1].info["score"] == 100


def test_leaving_the_gold_path_ends_gold_actions(env):
    env.reset(0)
    env.step("inventory")
    assert env.gold_actions() is None


def test_valid_list_is_fetched_only_when_read_and_expires_with_the_state(env):
    env.reset(0)
    adm = env.step("look around").admissible  # after the first step (always logged) lists are on demand
    assert not adm.fetched
    assert "look around" in adm and adm.fetched and len(adm) > 20
    step = env.step("look around")
    later = step.admissible
    env.step("inventory")
    with pytest.raises(RuntimeError, match="after its environment moved"):
        len(later)  # would be the next state's list


def test_wrong_focus_fails_the_episode(env):
    env.reset(0)
    step = env.step("focus on air")  # air is not a living thing: score -100, the episode ends
    assert step.done and step.info["failed"] and not step.info["won"]
    assert step.reward == pytest.approx(-1.0)


def test_step_limit_truncates(gold_dir):
    e = ScienceWorldEnv(ScienceWorldConfig(tasks=[TASK], gold_cache=str(gold_dir)), max_steps=3)
    try:
        e.reset(0)
        steps = [e.step("look around") for _ in range(3)]
        assert [s.done for s in steps] == [False, False, True]
        assert steps[-1].info["truncated"] and steps[-1].admissible is None
    finally:
        e.close()


def test_jvm_killed_mid_episode_is_restarted_and_the_episode_replayed(gold_dir):
    env_cfg = EnvConfig(name="scienceworld", max_steps=12)
    env_cfg.scienceworld = ScienceWorldConfig(tasks=[TASK], gold_cache=str(gold_dir))
    made: list[ScienceWorldEnv] = []
    killed = []

    class KillOnce:
        """Forwards to a real adapter and kills its JVM before the third step of the first attempt."""

        name = "scienceworld"

        def __init__(self) -> None:
            self.inner = make_env(env_cfg)
            made.append(self.inner)
            self.t = 0

        def reset(self, seed):
            self.t = 0
            return self.inner.reset(seed)

        def step(self, action):
            self.t += 1
            if self.t == 3 and not killed:
                killed.append(True)
                self.inner.java_process.kill()
                self.inner.java_process.wait()
            return self.inner.step(action)

        def gold_actions(self):
            return self.inner.gold_actions()

        def close(self):
            self.inner.close()

    gold = ScienceWorldEnv(env_cfg.scienceworld, max_steps=12)
    gold.reset(0)
    script = gold.gold_actions()
    gold.close()
    episodes = []
    with pytest.warns(UserWarning, match="JVM died.*replaying"):
        run_episodes(KillOnce, {"script": Script(script)}, [EpisodeJob(0, 0, (0,), "script")], episodes.append, 1)
    assert killed and made[0].restarts == 1
    assert len(episodes) == 1
    ep = episodes[0]
    assert [s.action for s in ep.steps] == script[: len(ep.steps)]  # whole episode, from its reset
    assert ep.info["won"] and sum(s.reward for s in ep.steps) == pytest.approx(1.0)


def test_collected_log_after_a_crash_is_valid_and_whole(tmp_path, gold_dir, monkeypatch):
    """A JVM killed during `adwm collect` costs a replay, never a partial episode in the log."""
    env_cfg = EnvConfig(name="scienceworld", max_steps=6)
    env_cfg.scienceworld = ScienceWorldConfig(tasks=[TASK], gold_cache=str(gold_dir), log_admissible_rate=0.5)
    original = ScienceWorldEnv.step
    calls = {"n": 0}

    def crashing_step(self, action):
        calls["n"] += 1
        if calls["n"] == 4:
            self.java_process.kill()
            self.java_process.wait()
        return original(self, action)

    monkeypatch.setattr(ScienceWorldEnv, "step", crashing_step)
    cfg = CollectConfig(
        n_episodes=3, n_envs=1, out=str(tmp_path / "log.jsonl"),
        behaviour=[BehaviourEntry(PolicyConfig(name="uniform", kind="uniform"), 1.0)],
    )  # fmt: skip
    with pytest.warns(UserWarning, match="replaying"):
        path = collect(cfg, env_cfg, seed=0, progress=False)
    eps = read_episodes(path, privileged=True)  # validates every line against the schema
    assert sorted(e.index for e in eps) == [0, 1, 2]
    for e in eps:
        assert e.steps[-1].done and len(e.steps) <= 6
        for s in e.steps:
            assert s.admissible is not None and s.action in s.admissible  # uniform reads every list
            assert s.behavior_logprob == pytest.approx(-np.log(len(s.admissible)))


def test_on_demand_lists_are_logged_at_the_configured_rate(tmp_path, gold_dir):
    env_cfg = EnvConfig(name="scienceworld", max_steps=8)
    env_cfg.scienceworld = ScienceWorldConfig(tasks=[TASK], gold_cache=str(gold_dir), log_admissible_rate=0.5)
    e = make_env(env_cfg)
    try:
        e.reset(0)
        gold = e.gold_actions()
    finally:
        e.close()
    episodes = []
    run_episodes(lambda: make_env(env_cfg), {"s": Script(gold)}, [EpisodeJob(0, 0, (0,), "s")], episodes.append, 1)
    logged = [s.admissible is not None for s in episodes[0].steps]
    assert logged[0] and not all(logged)  # a script never reads them: the first and the sampled steps are logged


def test_close_twice_and_collection_are_safe(gold_dir):
    e = ScienceWorldEnv(ScienceWorldConfig(tasks=[TASK], gold_cache=str(gold_dir)))
    e.reset(0)
    proc = e.java_process
    e.close()
    e.close()
    del e
    gc.collect()
    proc.wait(timeout=30)
    assert proc.poll() is not None  # the JVM is gone


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"split": "holdout"}, "env.scienceworld.split"),
        ({"observation": ["smell"]}, "env.scienceworld.observation"),
        ({"admissible": "sometimes"}, "env.scienceworld.admissible"),
        ({"log_admissible_rate": 2.0}, "env.scienceworld.log_admissible_rate"),
        ({"tasks": []}, "env.scienceworld.tasks"),
    ],
)
def test_bad_config_is_named(override, message):
    with pytest.raises(ValueError, match=message):
        ScienceWorldEnv(ScienceWorldConfig(**override))


def test_unknown_task_is_named(gold_dir):
    e = ScienceWorldEnv(ScienceWorldConfig(tasks=["bake-a-cake"], gold_cache=str(gold_dir)))
    try:
        with pytest.raises(ValueError, match="env.scienceworld.tasks: unknown task 'bake-a-cake'"):
            e.reset(0)
    finally:
        e.close()


@pytest.mark.slow
def test_the_regimes_long_scienceworld_cell_has_gold_paths_longer_than_find_tasks(gold_dir):
    """The `scienceworld_long` cell of experiment=regimes: on its test variations the gold paths run past the
    find-* tasks' longest (10 steps) and fit its step limit."""
    from adwm.config import load_config
    from adwm.sweeps.benchmark import benchmark_grid

    spec = benchmark_grid(load_config(["experiment=regimes"], "benchmark"), ["experiment=regimes"])
    env_cfg = OmegaConf.to_object(load_config([*spec.axes["cell"]["scienceworld_long"], "seed=0"], "quickstart").env)
    tasks = env_cfg.scienceworld.tasks
    env = ScienceWorldEnv(replace(env_cfg.scienceworld, gold_cache=str(gold_dir)), env_cfg.max_steps)
    try:
        lengths = []
        for seed in range(len(tasks)):
            env.reset(seed)
            lengths.append(len(env.gold_actions()))
    finally:
        env.close()
    assert min(lengths) > 10 and max(lengths) <= env_cfg.max_steps, dict(zip(tasks, lengths))
