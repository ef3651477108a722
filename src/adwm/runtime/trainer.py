"""Lightning Trainer and logger construction from config (shared by every training command)."""

from __future__ import annotations

import logging
import os
import random
import sys
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger

from adwm.runtime.config import LoggerConfig, TrainerConfig


def job_group(cfg: LoggerConfig, hparams: dict[str, Any]) -> str:
    """The W&B group of a job's runs: `logger.group` (a grid sets its name), else `<experiment>-seed<seed>`."""
    return cfg.group or f"{hparams.get('experiment', 'default')}-seed{hparams.get('seed', 0)}"


def wandb_mode(cfg: LoggerConfig) -> str:
    """`logger.mode`; the environment's WANDB_MODE wins, as in wandb itself (tests set it to disabled)."""
    return os.environ.get("WANDB_MODE") or cfg.mode


class StageWandbLogger(WandbLogger):
    """One W&B run per stage. Its config is the resolved configuration, given once when the run starts;
    the hyperparameters Lightning logs at every fit and validate (a module's own: the tokenizer JSON, the
    action vocabulary) are not logged again."""

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        return None


def build_logger(
    cfg: LoggerConfig, run_dir: Path, run_name: str, hparams: dict[str, Any], stage: str = "stage"
) -> Logger | bool:
    """The configured experiment logger (its name and mode checked by `LoggerConfig`) with the resolved
    config `hparams`: W&B gets one run per call (group = the job, job_type = `stage`); end it with
    `finish_logger` when the stage ends."""
    if cfg.name == "none":
        return False
    if cfg.name == "csv":
        logger: Logger = CSVLogger(save_dir=str(run_dir), name="csv", version=run_name)
        logger.log_hyperparams(hparams)
        return logger
    os.environ.setdefault("WANDB_SILENT", "true")  # no banner and footer around the command's own output
    mode = wandb_mode(cfg)
    return StageWandbLogger(
        project=cfg.project,
        entity=cfg.entity,
        group=job_group(cfg, hparams),
        job_type=stage,
        tags=list(cfg.tags),
        name=run_name,
        save_dir=str(run_dir),
        offline=mode == "offline",
        mode=mode,
        config=hparams,
        reinit="create_new",  # a new run even while another of this process is open
    )


def finish_logger(logger: Logger | bool) -> None:
    """End a stage's W&B run (the next stage opens its own); other loggers are flushed."""
    if isinstance(logger, WandbLogger):
        if logger._experiment is not None:
            logger.experiment.finish()
    elif isinstance(logger, Logger):
        logger.save()


class RngState(L.Callback):
    """Saves the torch, numpy and Python random states in each checkpoint and restores them on resume, so
    that a fit resumed from a checkpoint draws the noise, dropout and shuffles the uninterrupted fit drew.
    Stored as tensors and plain tuples: checkpoints load with `weights_only=True`."""

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        checkpoint["rng_state"] = {
            "torch": torch.get_rng_state(),
            "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
            "python": random.getstate(),
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        state = checkpoint.get("rng_state")
        if state is None:
            return
        torch.set_rng_state(state["torch"])
        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))


def build_trainer(cfg: TrainerConfig, logger: Logger | bool, run_dir: Path, **kwargs: Any) -> L.Trainer:
    """A Trainer from config; `kwargs` carry per-command settings (max_steps, callbacks...)."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep device banners and tips off the console
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    kwargs["callbacks"] = [*kwargs.get("callbacks", []), RngState()]
    return L.Trainer(
        accelerator=cfg.accelerator,
        devices=cfg.devices,
        precision=cfg.precision,
        log_every_n_steps=cfg.log_every_n_steps,
        enable_progress_bar=cfg.enable_progress_bar,
        logger=logger,
        default_root_dir=str(run_dir),
        enable_model_summary=False,
        deterministic=cfg.deterministic,
        **kwargs,
    )


def stopped_by_time(trainer: L.Trainer, section: str, max_minutes: float) -> bool:
    """Whether the `max_time` guard (`<section>.max_minutes`), not the step or epoch budget, ended the last
    fit; says so on stderr, since a slower machine would then have given another model."""
    timed_out = any(isinstance(c, Timer) and c.time_remaining("train") <= 0 for c in trainer.callbacks)
    if timed_out:
        print(
            f"{section}: stopped by {section}.max_minutes={max_minutes} at step {trainer.global_step}, "
            "before its step budget; the result is not what the step budget gives",
            file=sys.stderr,
        )
    return timed_out
