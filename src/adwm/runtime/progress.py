"""Progress bars on stderr (tqdm) for every stage that takes more than a few seconds, workers included.

Drawn on a terminal only (`ADWM_PROGRESS=1` forces them, `0` turns them off): a log file or a CI job gets
the stages' one-line summaries, not bar redraws. In a worker process (runtime/parallel.py) a bar takes the
worker's own line below the parent's bar of finished jobs, so bars of parallel jobs do not overwrite each
other.
"""

from __future__ import annotations

import os
import sys
from typing import Any

PROGRESS_ENV = "ADWM_PROGRESS"  # 1: always draw, 0: never, unset: on a terminal
SLOT_ENV = "ADWM_WORKER_SLOT"  # a worker's line under the parent's bar (set by runtime.parallel)


def _enabled() -> bool | None:
    """tqdm's `disable`: True off, False on, None (auto) on a terminal only."""
    value = os.environ.get(PROGRESS_ENV, "")
    return {"1": False, "0": True}.get(value)


def bar(total: int, desc: str, unit: str = "it") -> Any:
    """A tqdm bar over `total` units of work named `desc` (use as a context manager; `update(n)`)."""
    from tqdm import tqdm

    slot = int(os.environ.get(SLOT_ENV, "0"))
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=_enabled(),
        position=slot,
        leave=slot == 0,
        dynamic_ncols=True,
        mininterval=0.5,
    )


def say(message: str) -> None:
    """A line on stderr that does not break a bar being drawn."""
    from tqdm import tqdm

    tqdm.write(message, file=sys.stderr)
