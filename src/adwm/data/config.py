"""The episode data's config (light: `adwm config` reads it without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.runtime.checks import at_least, require


@dataclass
class DataConfig:
    log: str = "${collect.out}"  # episode log (JSONL, adwm.episode/1)
    val_fraction: float = 0.1  # share of episodes held out, whole episodes only
    history: int = 30  # observations in the history window (o_{t-history+1} .. o_t): builtin rewards a
    # milestone only the first time, so whether the goal object was taken before must be in view
    batch_size: int = 64
    num_workers: int = 0  # samples are small index tuples; worker processes cost more than they save
    max_episodes: int = 0  # 0: every logged episode; else the first N (a smaller log, e.g. for a budget curve)

    def __post_init__(self) -> None:
        require(0 <= self.val_fraction < 1, "data.val_fraction", self.val_fraction, "a share in [0, 1)")
        at_least(self, "data", 1, ("history", "batch_size"))
        at_least(self, "data", 0, ("num_workers", "max_episodes"))
