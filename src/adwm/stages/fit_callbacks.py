"""The callbacks of `adwm fit`: the encoder frozen after its budget, a checkpoint as each epoch starts (a kill
loses at most one epoch), and the fault point the crash tests kill a fit at."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L

from adwm.runtime.faults import reached


class FreezeEncoder(L.Callback):
    """Calls `freeze_encoder` once `steps` optimiser steps are done (0 = no step limit) or `share` of the
    time budget has passed, whichever comes first (checked before each step; a resumed fit past `steps`
    freezes at once)."""

    def __init__(self, share: float, max_minutes: float, steps: int = 0) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"fit.encoder_share: expected a value in [0, 1], got {share}")
        self.after_s = share * max_minutes * 60 if share < 1 else float("inf")
        self.steps = steps
        self.start: float | None = None
        self.frozen_at: int | None = None  # the global step at which the encoder was frozen

    def _due(self, trainer) -> bool:
        return (0 < self.steps <= trainer.global_step) or time.monotonic() - self.start >= self.after_s

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.monotonic()
        if bool(pl_module.encoder_frozen):  # a resumed fit frozen earlier: its cache, as the fit had it
            pl_module.freeze_encoder(trainer.datamodule.texts())
            return
        if self._due(trainer):
            self._freeze(trainer, pl_module)

    def state_dict(self) -> dict:  # kept in checkpoints: a resumed fit reports where the encoder froze
        return {"frozen_at": self.frozen_at}

    def load_state_dict(self, state_dict: dict) -> None:
        self.frozen_at = state_dict.get("frozen_at")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if not bool(pl_module.encoder_frozen) and self._due(trainer):
            self._freeze(trainer, pl_module)

    def _freeze(self, trainer, pl_module) -> None:
        pl_module.freeze_encoder(trainer.datamodule.texts())
        self.frozen_at = trainer.global_step


class EpochStartCheckpoint(L.Callback):
    """Saves `path` as each epoch after the first starts: the fit resumes at that epoch's first batch, where
    the data order (`EpochShuffle`) and the random state (`RngState`) are the uninterrupted fit's."""

    def __init__(self, path: Path) -> None:
        self.path, self._saving = path, False

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch > 0 and not trainer.fit_loop.restarting:
            self._saving = True
            try:
                trainer.save_checkpoint(self.path)
            finally:
                self._saving = False

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if self._saving:  # the new epoch has not fetched a batch: the counters still hold the last epoch's
            loop = checkpoint["loops"]["fit_loop"]
            progress = loop["epoch_loop.batch_progress"]
            progress["current"] = dict.fromkeys(progress["current"], 0)
            progress["is_last_batch"] = False


class FaultPoint(L.Callback):
    """`fit.step` of the crash tests (runtime/faults.py), after each optimiser step."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        reached("fit.step")
