"""`adwm fit`: train the world model on episode logs, with checkpoints and resume."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from adwm.atomic import atomic_write_json
from adwm.data.datamodule import TrajectoryDataModule
from adwm.models.world_model import WorldModelModule
from adwm.trainer import build_logger, build_trainer

to_object = OmegaConf.to_object  # not adwm.config.to_object: config.py imports FitConfig from here


@dataclass
class FitConfig:
    max_epochs: int = 30
    max_minutes: float = 9.0  # wall-clock cap; the last checkpoint is kept either way
    resume: bool = False  # continue from <run.dir>/checkpoints/last.ckpt
    checkpoint_every_n_steps: int = 100  # a kill loses at most this many steps
    val_every_n_epochs: int = 1
    limit_val_batches: float = 1.0


def fit(cfg: DictConfig) -> Path:
    """Train; returns the path of the last checkpoint. Metrics land in <run.dir>/metrics.json."""
    fcfg = to_object(cfg.fit)
    run_dir = Path(cfg.run.dir)
    ckpt_dir = run_dir / "checkpoints"
    last = ckpt_dir / "last.ckpt"
    dm = TrajectoryDataModule(to_object(cfg.data), cfg.seed)
    dm.setup()
    if fcfg.resume and last.is_file():
        module = WorldModelModule.load_from_checkpoint(last)
        ckpt_path: str | None = str(last)
    else:
        module = WorldModelModule(
            asdict(to_object(cfg.encoder)),
            asdict(to_object(cfg.world_model)),
            dm.cfg.history,
            dm.actions,
            texts=dm.observations,
        )
        ckpt_path = None
    checkpoint = ModelCheckpoint(dirpath=ckpt_dir, save_last=True, every_n_train_steps=fcfg.checkpoint_every_n_steps)
    logger = build_logger(to_object(cfg.logger), run_dir, "fit", OmegaConf.to_container(cfg))
    trainer = build_trainer(
        to_object(cfg.trainer),
        logger,
        run_dir,
        max_epochs=fcfg.max_epochs,
        max_time={"minutes": fcfg.max_minutes},
        callbacks=[checkpoint],
        check_val_every_n_epoch=fcfg.val_every_n_epochs,
        limit_val_batches=fcfg.limit_val_batches,
        num_sanity_val_steps=0,
    )
    start = time.time()
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    trainer.save_checkpoint(last)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    atomic_write_json(
        run_dir / "metrics.json",
        {
            "global_step": trainer.global_step,
            "epoch": trainer.current_epoch,
            "seconds": round(time.time() - start, 1),
            "train_steps": len(dm.train_items),
            "val_steps": len(dm.val_items),
            "actions": len(dm.actions),
            "metrics": metrics,
        },
    )
    return last
