"""Fault injection for the crash tests: `ADWM_FAULT=<point>:<n>` makes the process kill itself (SIGKILL:
no cleanup, no flush, as a power cut or the OOM killer would) when it reaches `point` for the n-th time.

Points are named after the unit of work they follow: `collect.episode`, `ground_truth.policy`,
`fit.step`, `project.step`, `evaluate.policy`, `ope.policy`, `quickstart.stage`, `grid.run`,
`worker.job` (each worker process counts its own). Without the variable `reached` costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_COUNTS: Counter[str] = Counter()


def reached(point: str) -> None:
    """Count one unit of work at `point`; SIGKILL this process when `ADWM_FAULT` names it and its count."""
    spec = os.environ.get("ADWM_FAULT")
    if not spec:
        return
    name, _, n = spec.rpartition(":")
    if name != point:
        return
    _COUNTS[point] += 1
    if _COUNTS[point] >= int(n):
        os.kill(os.getpid(), signal.SIGKILL)
