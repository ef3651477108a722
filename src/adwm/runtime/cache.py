"""The stage record: what a stage's output was made from, so that a rerun with the same settings reuses
it and a rerun with other settings makes it anew (or is refused, where an output only grows).

Every stage keeps its record the same way. A stage with one output folder or file keeps a `StageRecord`
(a JSON file beside the output: `{"settings": ..., **facts}`); a stage whose results file holds one entry
per policy keeps the settings inside each entry and asks `entry_matches`. Settings are compared as JSON
(tuples and lists alike), so a record read back from disk equals the settings that wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adwm.runtime.atomic import atomic_write_json, read_json


def as_json(settings: Any) -> Any:
    """`settings` as it reads back from a JSON file."""
    return json.loads(json.dumps(settings))


def entry_matches(entry: dict | None, settings: Any) -> bool:
    """Whether a results entry (`{"settings": ..., ...}`) was made with `settings`."""
    return entry is not None and entry.get("settings") == as_json(settings)


class StageRecord:
    """The record of one stage output: `path` (a JSON file) and the `outputs` that must exist beside it."""

    def __init__(self, path: str | Path, outputs: Sequence[str | Path] = ()) -> None:
        self.path = Path(path)
        self.outputs = [Path(p) for p in outputs]

    def load(self) -> dict | None:
        """The stored record, or None when there is none."""
        return read_json(self.path) if self.path.is_file() else None

    def matches(self, settings: Any) -> bool:
        """Every output exists and was made with `settings`."""
        return all(p.exists() for p in self.outputs) and entry_matches(self.load(), settings)

    def changed(self, settings: Any) -> list[str]:
        """Top-level settings keys whose stored value differs ([] when equal or when nothing is stored)."""
        stored = (self.load() or {}).get("settings")
        if stored is None:
            return []
        new = as_json(settings)
        return sorted(k for k in new.keys() | stored.keys() if new.get(k) != stored.get(k))

    def save(self, settings: Any, **facts: Any) -> None:
        """Record `settings` (and facts about the run, e.g. its seconds), atomically."""
        atomic_write_json(self.path, {"settings": as_json(settings), **facts})

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
