"""The autoregressive text world model (`evaluate.world=autoregressive`): its token stream, its training on a
toy log, its open-loop fidelity and its rollouts."""

from __future__ import annotations

import numpy as np
import pytest

from adwm.data.schema import Episode, StepRecord
from adwm.models.autoregressive import (
    ADM,
    END,
    ITEM,
    OBS,
    STEP,
    TASK,
    Vocabulary,
    encode_episode,
    parse_state_block,
    reward_values,
    state_block,
)
from adwm.models.config import AutoregressiveConfig
from adwm.policies.base import AgentState

COLOURS = ("red", "green", "blue")
PRESS = [f"press {c}" for c in COLOURS]


def lamp_log(episodes: int, seed: int = 0, steps: int = 5) -> list[Episode]:
    """`press <colour>` lights the lamp in that colour; green is the task: it pays 1 and ends the episode."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(episodes):
        obs, rows = "The lamp is dark.", []
        for _ in range(steps):
            colour = COLOURS[rng.integers(3)]
            win = colour == "green"
            rows.append(StepRecord(obs, f"press {colour}", 1.0 if win else 0.0, win, list(PRESS)))
            obs = f"The lamp is {colour}."
            if win:
                break
        out.append(Episode("lamp", e, "Light the lamp green.", "random", rows, obs))
    return out


def test_a_state_block_parses_back_to_its_observation_and_list():
    vocab = Vocabulary(["The", " lamp", " is", " dark.", "press", " red", " blue"])
    block = state_block(vocab, "The lamp is dark.", ["press red", "press blue"])
    # OBS, the observation's four pieces, ADM, the two items with ITEM between them, END
    assert block[0] == OBS and block[5] == ADM and block.count(ITEM) == 1 and block[-1] == END
    assert parse_state_block(vocab, block[1:]) == ("The lamp is dark.", ["press red", "press blue"])
    assert parse_state_block(vocab, state_block(vocab, "The lamp", None)[1:]) == ("The lamp", None)


def test_the_stream_learns_only_what_the_world_writes():
    """The task, the first state and the actions come from outside; every later state block is learnt, the
    reward and end sit at the `STEP` after each action."""
    ep = lamp_log(1, seed=3)[0]
    vocab = Vocabulary.build([ep], 100)
    values = reward_values([s.reward for s in ep.steps])
    enc = encode_episode(ep, vocab, values)
    assert enc.tokens[0] == TASK
    steps = np.flatnonzero(enc.tokens == STEP)
    assert len(steps) == len(ep.steps)
    assert [values[r] for r in enc.reward[steps]] == [s.reward for s in ep.steps]
    assert enc.done[steps].tolist() == [int(s.done) for s in ep.steps]
    assert (enc.reward[enc.tokens != STEP] == -1).all()
    # learnt: after each STEP, its state block up to its END
    learnt = np.zeros(len(enc.tokens), dtype=bool)
    for at in steps:
        block_end = at + 1 + list(enc.tokens[at + 1 :]).index(END)
        learnt[at + 1 : block_end + 1] = True
    assert (enc.learn == learnt).all()


def test_reward_values_are_the_logged_ones_or_equal_count_bins():
    assert reward_values([0.0, 1.0, 0.0, 0.5]) == [0.0, 0.5, 1.0]
    many = reward_values(np.linspace(0, 1, 1000).tolist())
    assert len(many) == 64 and many[0] == pytest.approx(np.linspace(0, 1, 1000)[:16].mean())


@pytest.fixture(scope="module")
def lamp_model():
    from adwm.models.autoregressive_fit import fit_autoregressive

    cfg = AutoregressiveConfig(hidden=64, d_embed=16, steps=600, batch_size=16, chunk=64, lr=1e-2)
    model, losses = fit_autoregressive(cfg, lamp_log(200), seed=0)
    return model, losses


@pytest.mark.slow  # ~30 s: the toy fit
@pytest.mark.ci
def test_on_a_toy_log_the_model_writes_the_next_state_open_loop(lamp_model):
    from adwm.models.autoregressive_fit import max_state_pieces, open_loop_exact

    model, losses = lamp_model
    assert np.mean(losses[-20:]) < 0.2 * np.mean(losses[:20])
    held_out = lamp_log(40, seed=1)
    fidelity = open_loop_exact(model, held_out, (1, 3), max_state_pieces(model, held_out))
    # the lamp shows the colour just pressed, and the list never changes: every written state is the logged one
    assert fidelity["exact@1"] == 1.0 and fidelity["exact_list@1"] == 1.0
    assert fidelity["exact@3"] == 1.0


class Press:
    """Always presses one colour; keeps the lists it was shown."""

    def __init__(self, colour: str) -> None:
        self.action, self.lists = f"press {colour}", []

    def act(self, states: list[AgentState], rngs) -> list[str]:
        self.lists += [s.admissible for s in states]
        return [self.action] * len(states)


@pytest.mark.slow
@pytest.mark.ci
def test_rollouts_in_the_model_pay_what_the_toy_world_pays(lamp_model):
    """Pressing green pays 1 at the first step and ends; pressing red never pays within the horizon."""
    from adwm.simulation.autoregressive import AutoregressiveTextWorld
    from adwm.simulation.worlds import LoggedStart, rollout_world

    model, _ = lamp_model
    world = AutoregressiveTextWorld(model, temperature=1.0, max_pieces=32)
    starts = [LoggedStart("Light the lamp green.", "The lamp is dark.", list(PRESS), 0)]
    green = rollout_world(world, Press("green"), starts, 50, 5, 0.9, seed=0)
    red_agent = Press("red")
    red = rollout_world(world, red_agent, starts, 50, 5, 0.9, seed=0)
    # the lists the model wrote, parsed: a drawn piece is wrong now and then (a token model's own error)
    assert np.mean([a == PRESS for a in red_agent.lists]) >= 0.9
    assert green.mean() == pytest.approx(1.0, abs=0.05)
    assert red.mean() == pytest.approx(0.0, abs=0.05)
    blue = [
        world.step_batch(world.start_batch(starts), ["press blue"], [np.random.default_rng(k)])[0] for k in range(20)
    ]
    assert all(s.observation == "The lamp is blue." and not done for s, _, done in blue)  # drawn, not just the mode
    again = rollout_world(world, Press("green"), starts, 50, 5, 0.9, seed=0)
    assert (again == green).all()  # a seed fixes every draw


def test_a_model_is_trained_once_and_loaded_while_its_settings_hold(tmp_path, monkeypatch):
    from adwm.simulation import autoregressive

    cfg = AutoregressiveConfig(out=str(tmp_path / "ar"), hidden=16, d_embed=8, steps=5, chunk=32)
    log = lamp_log(20)
    first = autoregressive.load_or_fit(cfg, log[:16], log[16:], seed=0)
    assert (tmp_path / "ar" / "metrics.json").is_file()

    def trained_again(*args, **kwargs):
        raise RuntimeError("trained again")

    monkeypatch.setattr(autoregressive, "fit_autoregressive", trained_again)
    again = autoregressive.load_or_fit(cfg, log[:16], log[16:], seed=0)
    for a, b in zip(first.state_dict().values(), again.state_dict().values()):
        assert (a == b).all()
    with pytest.raises(RuntimeError, match="trained again"):  # another training split: trained anew
        autoregressive.load_or_fit(cfg, log[:15], log[16:], seed=0)


def test_a_bad_setting_names_its_key():
    from adwm.config import load_config

    with pytest.raises(ValueError, match=r"evaluate.autoregressive.temperature: expected >= 0"):
        load_config(["evaluate.autoregressive.temperature=-1"], "evaluate")
    with pytest.raises(ValueError, match=r"evaluate.autoregressive.chunk: expected >= 1, got 0"):
        load_config(["evaluate.autoregressive.chunk=0"], "evaluate")
