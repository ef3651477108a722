"""Loggers from config: csv writes metrics and hyperparameters, wandb runs with no network, bad names fail."""

from __future__ import annotations

import pytest
from lightning.pytorch.loggers import CSVLogger, WandbLogger

from adwm.runtime.config import LoggerConfig
from adwm.runtime.trainer import build_logger


def test_none_and_csv(tmp_path):
    assert build_logger(LoggerConfig(name="none"), tmp_path, "run", {}) is False
    logger = build_logger(LoggerConfig(name="csv"), tmp_path, "run", {"seed": 3})
    assert isinstance(logger, CSVLogger)
    logger.log_metrics({"train/loss": 1.5}, step=0)
    logger.save()
    assert "train/loss" in (tmp_path / "csv" / "run" / "metrics.csv").read_text()
    assert "seed: 3" in (tmp_path / "csv" / "run" / "hparams.yaml").read_text()


def test_wandb_without_network(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")  # tests never write W&B runs
    logger = build_logger(LoggerConfig(name="wandb", group="g", tags=["a"]), tmp_path, "run", {"seed": 1})
    assert isinstance(logger, WandbLogger)
    logger.log_metrics({"train/loss": 1.0}, step=0)


def test_unknown_logger_and_mode(tmp_path):
    with pytest.raises(ValueError, match=r"logger.name: expected one of \['none', 'csv', 'wandb'\], got 'tensorboard'"):
        LoggerConfig(name="tensorboard")
    with pytest.raises(
        ValueError, match=r"logger.mode: expected one of \['offline', 'online', 'disabled'\], got 'cloud'"
    ):
        LoggerConfig(name="wandb", mode="cloud")
