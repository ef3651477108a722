"""Where the time of a job goes: exclusive wall time per named section and event counts, off by default.

    with costs.recording() as record:      # benchmarks/cost.py
        evaluate(cfg)
    record.seconds["simulate/denoise"], record.counts["agent/forward"]

Code marks its parts with `with costs.section("simulate/denoise"):` and counts with `costs.count(name, n)`
(also kept per innermost section: `agent/forward_passes@simulate/guidance`).
Sections nest and time exclusively: entering an inner section pauses the outer one, so the sections of a
recording add up to the time spent inside them. Outside a recording both calls cost one attribute check.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Record:
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _stack: list[list] = field(default_factory=list)  # [name, time the section last resumed]

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        if self._stack:
            outer = self._stack[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._stack.append([name, now])

    def leave(self) -> None:
        now = time.perf_counter()
        name, since = self._stack.pop()
        self.seconds[name] += now - since
        if self._stack:
            self._stack[-1][1] = now

    def to_dict(self) -> dict:
        return {
            "seconds": {k: round(v, 3) for k, v in sorted(self.seconds.items())},
            "counts": dict(sorted(self.counts.items())),
        }


_active: Record | None = None


@contextmanager
def recording() -> Iterator[Record]:
    """Record the sections and counts of the code run inside (one recording at a time)."""
    global _active
    if _active is not None:
        raise RuntimeError("costs.recording: a recording is already active")
    _active = Record()
    try:
        yield _active
    finally:
        _active = None


@contextmanager
def section(name: str) -> Iterator[None]:
    record = _active
    if record is None:
        yield
        return
    record.enter(name)
    try:
        yield
    finally:
        record.leave()


def count(name: str, n: int = 1) -> None:
    """Add n to `name`, and to `name@<section>` for the innermost section it happens in."""
    if _active is not None:
        _active.counts[name] += n
        if _active._stack:
            _active.counts[f"{name}@{_active._stack[-1][0]}"] += n
