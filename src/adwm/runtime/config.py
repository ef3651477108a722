"""Configs of the Lightning trainer and the experiment logger (light: no torch, no Lightning)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adwm.runtime.checks import at_least, one_of

LOGGERS = ("none", "csv", "wandb")


@dataclass
class TrainerConfig:
    accelerator: str = "cpu"  # "auto" picks a GPU when one is present
    devices: int = 1
    precision: str = "32-true"  # tiny models gain nothing from mixed precision on CPU
    log_every_n_steps: int = 10
    enable_progress_bar: bool = True
    num_threads: int = 0  # torch intra-op threads; 0 keeps torch's default (all cores)
    # torch's deterministic algorithms: a seed gives the same model on any number of threads (without them two
    # fits of one log on two threads differ; docs/decisions.md: deterministic training)
    deterministic: bool = True

    def __post_init__(self) -> None:
        one_of(self.accelerator, "trainer.accelerator", ("cpu", "gpu", "cuda", "mps", "auto"))
        at_least(self, "trainer", 1, ("devices", "log_every_n_steps"))
        at_least(self, "trainer", 0, ("num_threads",), "0 = torch's default")


@dataclass
class LoggerConfig:
    name: str = "none"  # none | csv | wandb
    project: str = "adwm"
    mode: str = "offline"  # offline: no network needed; `wandb sync` uploads later. online needs an account
    entity: str | None = None
    group: str | None = None  # W&B run group (grids set it to the grid name)
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        one_of(self.name, "logger.name", LOGGERS)
        one_of(self.mode, "logger.mode", ("offline", "online", "disabled"))
