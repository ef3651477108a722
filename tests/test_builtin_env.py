"""The built-in world: determinism, the gold solver, rewards and in-world refusals."""

from __future__ import annotations

import random

import pytest

from adwm.envs import BuiltinEnv, EnvConfig, TextEnv, make_env
from helpers import play_randomly


def play(env: BuiltinEnv, seed: int, actions_rng: random.Random) -> list:
    return play_randomly(env, seed, actions_rng, env.max_steps)


def test_implements_text_env_protocol():
    assert isinstance(make_env(EnvConfig()), TextEnv)


def test_same_seed_same_world_and_dynamics():
    a = play(BuiltinEnv(), 17, random.Random(3))
    b = play(BuiltinEnv(), 17, random.Random(3))
    assert a == b
    assert play(BuiltinEnv(), 18, random.Random(3))[:2] != a[:2]


def test_reset_does_not_depend_on_previous_episode():
    env = BuiltinEnv()
    first = env.reset(5).observation
    play(env, 9, random.Random(0))
    assert env.reset(5).observation == first


@pytest.mark.parametrize("seed_block", range(4))
def test_gold_solver_solves_every_task_with_full_return(seed_block):
    env = BuiltinEnv()
    for seed in range(seed_block * 100, seed_block * 100 + 100):
        reset = env.reset(seed)
        gold = env.gold_actions()
        assert 4 <= len(gold) <= 15, (seed, gold)
        total, step = 0.0, None
        for t, action in enumerate(gold):
            assert action in (reset.admissible if t == 0 else step.admissible), (seed, action)
            step = env.step(action)
            total += step.reward
            assert step.done == (t == len(gold) - 1)
        assert step.info["won"] and total == pytest.approx(1.0), seed


def test_gold_plan_is_optimal_against_exhaustive_search():
    """No action sequence shorter than the gold plan wins (checked by brute force on short tasks)."""
    env = BuiltinEnv()
    checked = 0
    for seed in range(200):
        env.reset(seed)
        n = len(env.gold_actions())
        if n > 5:
            continue
        frontier = [[]]
        for _ in range(n - 1):
            nxt = []
            for prefix in frontier:
                env.reset(seed)
                step = None
                for a in prefix:
                    step = env.step(a)
                adm = env.reset(seed).admissible if not prefix else step.admissible
                for a in adm:
                    env.reset(seed)
                    for b in prefix:
                        env.step(b)
                    assert not env.step(a).info["won"], (seed, prefix + [a])
                    nxt.append(prefix + [a])
            frontier = nxt
        checked += 1
        if checked == 5:
            break
    assert checked == 5


def test_inadmissible_action_gets_in_world_reply():
    env = BuiltinEnv()
    reset = env.reset(0)
    step = env.step("fly to the moon")
    assert step.reward == 0.0 and not step.done and "do not understand" in step.observation
    step = env.step("take the unicorn")
    assert "cannot take the unicorn" in step.observation
    assert step.admissible == reset.admissible  # nothing changed


def test_step_limit_truncates():
    env = BuiltinEnv(max_steps=3)
    env.reset(0)
    steps = [env.step("look") for _ in range(3)]
    assert [s.done for s in steps] == [False, False, True]
    assert steps[-1].info["truncated"] and steps[-1].admissible is None


def test_one_word_changes_the_observation_and_the_dynamics():
    """'open' vs 'closed' doors: only an open door admits 'go to'."""
    env = BuiltinEnv()
    for seed in range(50):
        reset = env.reset(seed)
        closed = [a for a in reset.admissible if a.startswith("open the door to ")]
        if closed:
            room = closed[0][len("open the door to the ") :]
            assert f"The door to the {room} is closed" in reset.observation
            step = env.step(closed[0])
            assert f"The door to the {room} is open" in step.observation
            assert f"go to the {room}" in step.admissible and f"go to the {room}" not in reset.admissible
            return
    pytest.fail("no closed door in 50 worlds")


def test_unknown_env_name_is_named():
    with pytest.raises(
        ValueError,
        match=r"env.name: expected one of \['builtin', 'scienceworld', 'textworld', 'shop', 'multihop', 'log'\], got 'nope'",
    ):
        make_env(EnvConfig(name="nope"))


def test_gold_plan_bounds_no_world_meets_are_a_named_error():
    from adwm.envs.builtin import BuiltinEnvConfig

    small = BuiltinEnvConfig(min_rooms=2, max_rooms=2, locked_door_prob=0.0, min_gold_steps=40, max_gold_steps=60)
    with pytest.raises(ValueError, match=r"env.builtin.min_gold_steps: no world of 2000 sampled for seed 5 .* 40-60"):
        BuiltinEnv(small).reset(5)
