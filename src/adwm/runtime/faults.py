"""Fault injection for the crash tests: `ADWM_FAULT=<point>:<n>` makes the process kill itself (SIGKILL:
no cleanup, no flush, as a power cut or the OOM killer would) when it reaches `point` for the n-th time.

Points are named after the unit of work they follow: `collect.episode`, `ground_truth.policy`,
`fit.step`, `project.train`, `project.backbone`, `evaluate.policy`, `ope.policy`, `quickstart.stage`,
`grid.run`, `worker.job` (each worker process counts its own), and `scienceworld.call`, which kills the
simulator's JVM instead of this process. Without the variable `reached` costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable

_COUNTS: Counter[str] = Counter()


def reached(point: str, fault: Callable[[], None] | None = None) -> None:
    """Count one unit of work at `point`; when `ADWM_FAULT` names it and its count, run `fault` (default:
    SIGKILL this process)."""
    spec = os.environ.get("ADWM_FAULT")
    if not spec:
        return
    name, _, n = spec.rpartition(":")
    if name != point:
        return
    _COUNTS[point] += 1
    if _COUNTS[point] == int(n):
        if fault is not None:
            fault()
        else:
            os.kill(os.getpid(), signal.SIGKILL)
