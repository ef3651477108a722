"""`evaluate.world=autoregressive`: the agent in a token-by-token text world model of the log
(models/autoregressive.py), the baseline against which per-transition denoising is measured.

Each rollout keeps the model's recurrent state (its whole episode so far, task first). A step reads the
action, takes the expected reward of the reward head (the mean of the log's reward values under it: the
expected return is the model's own, with less variance than a drawn reward) and draws the end, then writes
the next observation and its action list piece by piece with the rollout's own generator. A written state
without a list (or with an empty one) keeps the list the agent last had, where the log has lists.

The model is trained the first time a world needs it and kept in `evaluate.autoregressive.out` with the
settings it was made with (the log's training split among them); a later evaluation with the same
settings loads it. Worker processes take turns under a lock there, so one trains and the others load.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from adwm.data.schema import Episode
from adwm.models.autoregressive import (
    AutoregressiveWorldModel,
    action_block,
    parse_state_block,
    start_block,
)
from adwm.models.autoregressive_fit import fit_autoregressive, max_state_pieces, open_loop_exact
from adwm.models.config import AutoregressiveConfig
from adwm.runtime.atomic import atomic_write_bytes, atomic_write_json, file_lock
from adwm.runtime.cache import StageRecord
from adwm.runtime.progress import bar, say
from adwm.simulation.worlds import LoggedStart, TextState

FIDELITY_KS = (1, 5, 10)


def episodes_digest(episodes: Sequence[Episode]) -> str:
    """A digest of what the model learns from: every episode's task, texts, actions, rewards and ends."""
    h = hashlib.sha1()
    for ep in episodes:
        rows = [[s.observation, s.admissible, s.action, s.reward, ep.ended(t)] for t, s in enumerate(ep.steps)]
        h.update(json.dumps([ep.task, rows, ep.final_observation]).encode())
    return h.hexdigest()[:16]


def _settings(cfg: AutoregressiveConfig, train: Sequence[Episode], seed: int) -> dict:
    own = {k: v for k, v in asdict(cfg).items() if k not in ("out", "temperature", "max_pieces")}
    return {"model": own, "seed": seed, "train": episodes_digest(train), "episodes": len(train)}


def _save(model: AutoregressiveWorldModel, path: Path) -> None:
    buf = io.BytesIO()
    torch.save({"pieces": model.vocab.pieces, "values": model.values.tolist(), "state": model.state_dict()}, buf)
    atomic_write_bytes(path, buf.getvalue())


def _load(cfg: AutoregressiveConfig, path: Path) -> AutoregressiveWorldModel:
    stored = torch.load(path, map_location="cpu", weights_only=True)
    model = AutoregressiveWorldModel(cfg, stored["pieces"], stored["values"])
    model.load_state_dict(stored["state"])
    return model.eval()


def load_or_fit(
    cfg: AutoregressiveConfig, train: Sequence[Episode], val: Sequence[Episode], seed: int
) -> AutoregressiveWorldModel:
    """The model of `cfg` on `train`: loaded from `cfg.out` where it was made with these settings, else
    trained, with its open-loop fidelity on `val` written to `<out>/metrics.json`."""
    out = Path(cfg.out)
    weights = out / "model.pt"
    record = StageRecord(out / "record.json", [weights])
    settings = _settings(cfg, train, seed)
    with file_lock(out / "fit.lock"):
        if record.matches(settings):
            return _load(cfg, weights)
        say(f"evaluate.world=autoregressive: training the text world model in '{out}' ({cfg.steps} steps)")
        start = time.perf_counter()
        with bar(cfg.steps, "autoregressive fit", "step") as shown:
            model, losses = fit_autoregressive(cfg, train, seed, lambda step, loss: shown.update(1))
        seconds = time.perf_counter() - start
        fidelity = open_loop_exact(model, val, FIDELITY_KS, max_state_pieces(model, train))
        _save(model, weights)
        metrics = {
            "parameters": sum(p.numel() for p in model.parameters()),
            "vocabulary": len(model.vocab),
            "train_loss_last100": float(np.mean(losses[-100:])),
            "seconds": round(seconds, 1),
            **{f"val_open_loop_{k}": v for k, v in fidelity.items()},
        }
        atomic_write_json(out / "metrics.json", metrics)
        record.save(settings, seconds=round(seconds, 1))
        return model


class AutoregressiveTextWorld:
    """A text world (simulation/worlds.py's `TextWorld`) whose states the model writes; `start_batch` and
    `step_batch` advance every live rollout in one pass of the model."""

    def __init__(self, model: AutoregressiveWorldModel, temperature: float, max_pieces: int) -> None:
        self.model, self.temperature, self.max_pieces = model, temperature, max_pieces

    def start_batch(self, starts: Sequence[LoggedStart]) -> list[TextState]:
        blocks = [start_block(self.model.vocab, s.task, s.observation, s.admissible) for s in starts]
        state, _ = self.model.read(self.model.initial_state(len(starts)), blocks)
        return [TextState(s.task, s.observation, s.admissible, [], state[:, i].clone()) for i, s in enumerate(starts)]

    def start(self, start: LoggedStart) -> TextState:
        return self.start_batch([start])[0]

    def step_batch(
        self, states: Sequence[TextState], actions: Sequence[str], rngs: Sequence[np.random.Generator]
    ) -> list[tuple[TextState, float, bool]]:
        model = self.model
        hidden = torch.stack([s.handle for s in states], 1)
        hidden, y = model.read(hidden, [action_block(model.vocab, a) for a in actions])
        rewards, p_end = model.step_heads(y)
        ends = [bool(rng.random() < p) for rng, p in zip(rngs, p_end)]
        written, hidden = model.write(hidden, rngs, self.temperature, self.max_pieces)
        out = []
        for i, (s, a, ids) in enumerate(zip(states, actions, written)):
            text, listed = parse_state_block(model.vocab, ids)
            adm = listed if listed else s.admissible
            history = [*s.history, (s.observation, a)]
            out.append((TextState(s.task, text, adm, history, hidden[:, i].clone()), float(rewards[i]), ends[i]))
        return out

    def step(self, state: TextState, action: str, rng: np.random.Generator) -> tuple[TextState, float, bool]:
        return self.step_batch([state], [action], [rng])[0]

    def close(self) -> None:
        return None
