"""TextWorld adapter on real generated games: cleaning, rewards, winning and losing, the game cache."""

from __future__ import annotations

from dataclasses import replace

import pytest
from omegaconf import OmegaConf

pytest.importorskip("textworld")

from adwm.data.schema import read_episodes  # noqa: E402
from adwm.envs import EnvConfig  # noqa: E402
from adwm.envs.textworld import (  # noqa: E402
    CookingSettings,
    TextWorldConfig,
    TextWorldEnv,
    clean_feedback,
    textworld_state_key,
)
from adwm.policies.config import PolicyConfig  # noqa: E402
from adwm.stages.collect import collect  # noqa: E402
from adwm.stages.config import BehaviourEntry, CollectConfig

BANNER = (
    "\n\n\n                    ________  ________  __    __  ________\n                   |        \\|        \\|"
    "\n\nYou are hungry! Let's cook a delicious meal.\n\n-= Kitchen =-\nYou see a fridge.\n\n>"
    "                                                                     -= Kitchen =-0/1"
)


def small(cache, games: int = 2) -> TextWorldConfig:
    return TextWorldConfig(games=games, cache=str(cache), cooking=CookingSettings(go=1))  # one room: ~7-step games


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tw_games")


@pytest.fixture(scope="module")
def env(cache):
    e = TextWorldEnv(small(cache), max_steps=30)
    yield e
    e.close()


def test_clean_feedback_drops_banner_and_status_line():
    text = clean_feedback(BANNER, "You are hungry! Let's cook a delicious meal.")
    assert text == "-= Kitchen =-\nYou see a fridge."
    lost = "You burned the carrot!\n\n *** You lost! ***\n\nWould you like to RESTART, RESTORE a saved game, QUIT"
    assert clean_feedback(lost) == "You burned the carrot!\n\n *** You lost! ***"


def test_gold_game_wins_with_return_one(env):
    reset = env.reset(0)
    assert "$$" not in reset.observation and "|" not in reset.observation  # no banner
    assert "-= Kitchen =-" in reset.observation and not reset.observation.rstrip().endswith("0/5")
    assert textworld_state_key(reset.observation) == ("Kitchen", "nothing")  # fidelity's key: room, inventory
    assert reset.task.startswith("You are hungry")
    assert reset.admissible == sorted(set(reset.admissible)) and 5 <= len(reset.admissible) <= 80
    total, step = 0.0, None
    while step is None or not step.done:
        gold = env.gold_actions()
        if step is None or not step.done:
            admissible = reset.admissible if step is None else step.admissible
            assert gold[0] in admissible  # the winning command is among the candidates
        step = env.step(gold[0])
        total += step.reward
    assert step.info["won"] and not step.info["failed"]
    assert total == pytest.approx(1.0)  # cumulative score / max score


def test_burning_an_ingredient_loses(env):
    env.reset(0)
    for action in env.gold_actions():
        step = env.step(action)
        if action.startswith("cook"):
            step = env.step(action)  # cooking twice burns it
            break
    assert step.done and step.info["failed"] and not step.info["won"]
    assert "Would you like" not in step.observation
    assert env.gold_actions() is None or not env.gold_actions()


def test_step_limit_truncates(cache):
    e = TextWorldEnv(small(cache), max_steps=2)
    try:
        e.reset(1)
        steps = [e.step("look"), e.step("look")]
        assert [s.done for s in steps] == [False, True] and steps[-1].info["truncated"]
    finally:
        e.close()


def test_game_cache_is_reused_on_a_second_run(cache):
    first = TextWorldEnv(small(cache, games=3))
    first.reset(2)  # game 2 of the pool: generated here unless an earlier test made it
    path = first.game_path(2)
    stamp = path.stat().st_mtime_ns
    first.close()
    second = TextWorldEnv(small(cache, games=3))
    for seed in (0, 1, 2, 5):  # seed 5 plays game 5 % 3 = 2
        second.reset(seed)
    assert second.generated == 0 and path.stat().st_mtime_ns == stamp
    other = TextWorldEnv(TextWorldConfig(games=3, cache=str(cache), cooking=CookingSettings(go=1, recipe=2, take=2)))
    assert other.game_path(2) != path  # other settings, another game file
    second.close()


def test_same_seed_same_game_and_text(cache):
    a, b = TextWorldEnv(small(cache)), TextWorldEnv(small(cache))
    try:
        ra, rb = a.reset(1), b.reset(1)
        assert ra.observation == rb.observation and ra.admissible == rb.admissible
        assert a.step("look").observation == b.step("look").observation
    finally:
        a.close()
        b.close()


def test_collect_on_textworld_writes_valid_logs(tmp_path, cache):
    env_cfg = EnvConfig(name="textworld", max_steps=8, textworld=small(cache))
    cfg = CollectConfig(
        n_episodes=4, n_envs=2, out=str(tmp_path / "log.jsonl"),
        behaviour=[BehaviourEntry(PolicyConfig(name="uniform", kind="uniform"), 1.0)],
    )  # fmt: skip
    eps = read_episodes(collect(cfg, env_cfg, seed=0, progress=False), privileged=True)
    assert sorted(e.index for e in eps) == [0, 1, 2, 3] and all(e.env == "textworld" for e in eps)
    for e in eps:
        assert e.steps[-1].done and all(s.action in s.admissible for s in e.steps)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (TextWorldConfig(challenge="tw-zork"), "env.textworld.challenge"),
        (TextWorldConfig(games=0), "env.textworld.games"),
        (TextWorldConfig(observation=["smell"]), "env.textworld.observation"),
        (TextWorldConfig(cooking=CookingSettings(go=5)), "env.textworld.cooking.go"),
        (TextWorldConfig(cooking=CookingSettings(recipe=1, take=2)), "env.textworld.cooking.take"),
    ],
)
def test_bad_config_is_named(cfg, message):
    with pytest.raises(ValueError, match=message):
        TextWorldEnv(cfg)


@pytest.mark.slow
def test_the_regimes_long_textworld_cell_has_walkthroughs_of_twenty_steps_or_more(tmp_path):
    """The `textworld_long` cell of experiment=regimes: its first games' winning plans are 20+ steps, about
    twice the textworld_cooking cell's (9-12), and fit its step limit."""
    from adwm.config import load_config
    from adwm.sweeps.benchmark import benchmark_grid

    spec = benchmark_grid(load_config(["experiment=regimes"], "benchmark"), ["experiment=regimes"])
    env_cfg = OmegaConf.to_object(load_config([*spec.axes["cell"]["textworld_long"], "seed=0"], "quickstart").env)
    env = TextWorldEnv(replace(env_cfg.textworld, games=2, cache=str(tmp_path)), env_cfg.max_steps)
    lengths = []
    for seed in range(2):
        env.reset(seed)
        lengths.append(len(env.gold_actions()))
    env.close()
    assert min(lengths) >= 20 and max(lengths) <= env_cfg.max_steps, lengths
