"""Crash-safe file writes: results appear whole or not at all."""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


@contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created if missing), held for the `with` block: worker
    processes that share a results file or a cache folder take turns."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def update_json(path: str | Path, update: Callable[[dict], None]) -> dict:
    """Read the JSON object at `path` ({} if missing), apply `update` to it in place and write it back
    atomically, all under `file_lock(<path>.lock)`, so processes adding their own entries to one file
    never drop another's; returns the object written."""
    path = Path(path)
    with file_lock(path.with_name(path.name + ".lock")):
        obj = json.loads(path.read_text()) if path.is_file() else {}
        update(obj)
        atomic_write_json(path, obj)
    return obj
