"""The text decoder z -> observation: exact pieces, round trips, and a toy world where the next state is a
function of the action, so the action-free prior (omega = 0) must read worse than the conditional model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from adwm.config import ConfigError, load_config
from adwm.models.text_decoder import UNKNOWN, TextDecoder, build_vocabulary, pieces
from adwm.models.world_model.config import TextDecoderConfig


@pytest.mark.parametrize("text", ["You are in the hall.", "  two  spaces\nand a line  ", "", "one"])
def test_pieces_join_back_to_the_text_exactly(text):
    assert "".join(pieces(text)) == text


def _fit(decoder: TextDecoder, z: torch.Tensor, texts: list[str], steps: int, prev: list[str] | None = None) -> None:
    ids = decoder.ids(texts)
    prev_ids = None if prev is None else decoder.source_ids(prev)
    opt = torch.optim.AdamW(decoder.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, len(texts), (32,), generator=gen)
        loss = decoder.loss(z[idx], ids[idx], None if prev_ids is None else prev_ids[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_the_decoder_round_trips_the_texts_it_was_trained_on():
    rooms, things = ["hall", "kitchen", "garden", "attic"], ["a key", "an apple", "nothing", "a lamp", "a coin"]
    texts = [f"You are in the {r}. You carry {t}." for r in rooms for t in things]  # 20 states of 2 factors
    torch.manual_seed(0)
    z = torch.randn(len(texts), 2, 8)  # one fixed latent a state, as a deterministic encoder gives
    vocab = build_vocabulary(texts, 100)
    assert vocab["length"] == max(len(pieces(t)) for t in texts) + 1
    decoder = TextDecoder(TextDecoderConfig(hidden=64), vocab["pieces"], 16, vocab["length"])
    assert decoder.decode(z[:3]) != texts[:3]  # untrained: the test can fail
    _fit(decoder, z, texts, 400)
    assert decoder.decode(z) == texts


def test_after_the_text_before_it_the_decoder_writes_a_state_it_never_saw():
    """The latent names only what the action changed (what is carried); the room stays as the text before it
    showed it. Trained on a quarter of the (room, thing) pairs, the decoder must copy the room from the previous
    text to write the held-out pairs exactly; without the previous text it cannot know the room."""
    rooms = ["hall", "kitchen", "garden", "attic", "cellar", "study", "porch", "loft"]
    things = ["a key", "an apple", "nothing", "a lamp", "a coin", "a map", "a rope", "a cup"]
    code = torch.randn(len(things), 2, 8, generator=torch.Generator().manual_seed(1))  # a latent a thing

    def state(r, t):
        return f"You are in the {rooms[r]}. You carry {things[t]}."

    pairs = [(r, t) for r in range(len(rooms)) for t in range(len(things))]
    train = [(r, t) for r, t in pairs if (r + t) % 4 == 0]  # 16 of 64 states
    held = [(r, t) for r, t in pairs if (r + t) % 4 == 2]
    prev = [state(r, (t + 1) % len(things)) for r, t in train]  # the state before: same room, another thing
    vocab = build_vocabulary([state(r, t) for r, t in pairs], 100)
    torch.manual_seed(0)
    decoder = TextDecoder(TextDecoderConfig(hidden=64), vocab["pieces"], 16, vocab["length"])
    _fit(decoder, code[[t for _, t in train]], [state(r, t) for r, t in train], 600, prev)
    written = decoder.decode(code[[t for _, t in held]], [state(r, (t + 3) % len(things)) for r, t in held])
    assert np.mean([w == state(r, t) for w, (r, t) in zip(written, held)]) >= 0.9
    alone = decoder.decode(code[[t for _, t in held]])  # no text before: the room is a guess
    assert np.mean([w == state(r, t) for w, (r, t) in zip(alone, held)]) <= 0.5


def test_a_thing_named_only_in_the_task_is_copied_from_it():
    """The latent names the room and that something lies there, not what: the task names it. Trained on a
    quarter of the (room, thing) pairs, the decoder must copy the thing from the task it reads with the text
    before (`source_text`) to write held-out pairs exactly; with the text before alone it cannot."""
    rooms = ["hall", "kitchen", "garden", "attic", "cellar", "study", "porch", "loft"]
    things = ["key", "apple", "lamp", "coin", "map", "rope", "cup", "book"]
    code = torch.randn(len(rooms), 2, 8, generator=torch.Generator().manual_seed(2))  # a latent a room

    def state(r, t):
        return f"You are in the {rooms[r]}. You see a {things[t]}."

    def task(t):
        return f"Find the {things[t]}."

    pairs = [(r, t) for r in range(len(rooms)) for t in range(len(things))]
    train = [(r, t) for r, t in pairs if (r + t) % 4 == 0]
    held = [(r, t) for r, t in pairs if (r + t) % 4 == 2]
    vocab = build_vocabulary([state(r, t) for r, t in pairs], 100)
    torch.manual_seed(0)
    decoder = TextDecoder(TextDecoderConfig(hidden=64, sources=1), vocab["pieces"], 16, vocab["length"])
    before = "You are in the hall."
    assert decoder.source_text(task(0), ["old", before]) == f"{task(0)} {before}"  # the last `sources` texts
    sources = [decoder.source_text(task(t), [before]) for _, t in train]
    _fit(decoder, code[[r for r, _ in train]], [state(r, t) for r, t in train], 600, sources)
    written = decoder.decode(code[[r for r, _ in held]], [decoder.source_text(task(t), [before]) for _, t in held])
    assert np.mean([w == state(r, t) for w, (r, t) in zip(written, held)]) >= 0.9
    alone = decoder.decode(code[[r for r, _ in held]], [before] * len(held))  # no task: the thing is a guess
    assert np.mean([w == state(r, t) for w, (r, t) in zip(alone, held)]) <= 0.5


def test_an_unknown_piece_is_never_written_and_a_long_text_is_cut():
    vocab = build_vocabulary(["a b c"], 10)
    decoder = TextDecoder(TextDecoderConfig(hidden=16), vocab["pieces"], 4, 3)
    ids = decoder.ids(["a zebra b c d"])
    assert ids.tolist() == [[decoder.index["a"], UNKNOWN, decoder.index[" b"]]]  # cut at length 3
    with torch.no_grad():
        decoder.out.bias.zero_()
        decoder.out.bias[UNKNOWN] = 100.0  # the most likely piece everywhere is `unknown`
        decoder.gate.bias.fill_(-100.0)  # and with a text before, every piece is copied from it
    assert all("zebra" not in t for t in decoder.decode(torch.randn(4, 1, 4)))
    assert all("zebra" not in t for t in decoder.decode(torch.randn(2, 1, 4), ["a zebra", "zebra zebra"]))


def test_a_bad_decoder_size_names_its_key():
    with pytest.raises(ConfigError, match=r"world_model.decoder.hidden: expected >= 1, got 0"):
        load_config(["world_model.decoder.hidden=0"], "fit")


COLOURS = ("red", "green", "blue")


def _toy_log(path, episodes: int = 60, steps: int = 5) -> None:
    """A world whose next observation is a function of the action alone: `press <colour>` lights it."""
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for e in range(episodes):
            obs, rows = "The lamp is dark.", []
            for _ in range(steps):
                colour = COLOURS[rng.integers(3)]
                rows.append({"observation": obs, "action": f"press {colour}", "reward": 0.0, "done": False})
                obs = f"The lamp is {colour}."
            ep = {"schema": "adwm.episode/1", "env": "lamp", "seed": e, "task": "Light the lamp.", "policy": "random"}
            f.write(json.dumps({**ep, "steps": rows, "final_observation": obs}) + "\n")


@pytest.mark.slow  # ~40 s: one small fit
@pytest.mark.ci
def test_on_a_world_that_follows_the_action_omega_zero_reads_worse(tmp_path):
    from adwm.cli import main
    from adwm.data.schema import read_episodes
    from adwm.guidance.config import GuidanceConfig
    from adwm.models.world_model.module import WorldModelModule
    from adwm.runtime.checkpoints import load_checkpoint
    from adwm.simulation.fidelity import decoded_states

    log = tmp_path / "lamp.jsonl"
    _toy_log(log)
    root = tmp_path / "runs"
    overrides = ["experiment=smoke", "env=log", f"data.log={log}", f"run.root={root}", "ablation.reader=decoded"]
    overrides.append("fit.max_epochs=100")
    assert main(["fit", *overrides, "fit.max_steps=500", "fit.encoder_steps=200", "fit.decoder.steps=400"]) == 0
    wm = load_checkpoint(WorldModelModule, root / "fit" / "checkpoints" / "last.ckpt", "test")
    metrics = json.loads((root / "fit" / "metrics.json").read_text())["metrics"]
    assert metrics["fidelity/decoded_exact@5"] == 1.0  # closed loop, unsnapped: the decoded text is the logged one
    assert metrics["decoder/train_roundtrip"] >= 0.75  # of the four distinct observations
    episodes = read_episodes(log)[:40]

    def accuracy(omega: float) -> float:
        states = decoded_states(wm, episodes, (1, 3, 5), seed=0, guidance=GuidanceConfig(omega=omega, eta=0.0))
        # after k presses the lamp shows the colour of the k-th
        true = {k: [f"The lamp is {ep.steps[k - 1].action.split()[1]}." for ep in episodes] for k in (1, 3, 5)}
        hits = [states[k][i] == true[k][i] for k in (1, 3, 5) for i in range(len(episodes))]
        return float(np.mean(hits))

    conditional, prior = accuracy(1.0), accuracy(0.0)
    assert conditional >= 0.9  # the action fixes the colour: the model reads it
    assert prior <= 0.6 < conditional  # the action-free prior guesses among three colours
