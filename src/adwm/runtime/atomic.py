"""Crash-safe file writes: results appear whole or not at all."""

from __future__ import annotations

import fcntl
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over `path`."""
    atomic_write_bytes(path, text.encode())


def _file_mode() -> int:
    """The mode a plain `open(path, "w")` would give: 0o666 less the process umask (mkstemp's is 0o600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:  # a full disk, a lost permission: name the file; the old one is left whole
        Path(tmp).unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror or str(err), str(path)) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


NONFINITE = "nonfinite"  # the flag of strict JSON: {key path: "nan" | "inf" | "-inf"} of the values written as null


def _strict(obj: Any) -> Any:
    """`obj` with every NaN or infinity written as null; each dict that held one gets a `nonfinite` flag
    naming the key (`ci[0]` for a list element) and the value, so `read_json` restores it."""
    if isinstance(obj, dict):
        out, flags = {}, {}
        for key, value in obj.items():
            out[key] = _strict_value(value, str(key), flags)
        if flags:
            out[NONFINITE] = flags
        return out
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    return obj


def _strict_value(value: Any, where: str, flags: dict) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        flags[where] = repr(value)  # 'nan', 'inf', '-inf'
        return None
    if isinstance(value, list | tuple):
        return [_strict_value(v, f"{where}[{i}]", flags) for i, v in enumerate(value)]
    return _strict(value)


def _restore(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_restore(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    flags = obj.pop(NONFINITE, None) if isinstance(obj.get(NONFINITE), dict) else None
    for key, value in obj.items():
        obj[key] = _restore(value)
    for where, value in (flags or {}).items():
        key, *indices = where.replace("]", "").split("[")
        if key not in obj:
            continue
        if not indices:
            obj[key] = float(value)
            continue
        node = obj[key]
        for i in indices[:-1]:
            node = node[int(i)]
        node[int(indices[-1])] = float(value)
    return obj


def to_json(obj: Any) -> str:
    """Strict JSON text (no bare NaN or Infinity, which other JSON readers reject)."""
    return json.dumps(_strict(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"


def read_json(path: str | Path) -> Any:
    """A JSON file written by `atomic_write_json`, its non-finite values restored from their flags."""
    return _restore(json.loads(Path(path).read_text()))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, to_json(obj))


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


class Busy(RuntimeError):
    """Another process holds the lock of an output (a log, a results file, a run folder)."""


@contextmanager
def exclusive(path: str | Path, what: str) -> Iterator[None]:
    """Hold `<path>.lock` for the `with` block, or fail at once with `Busy` naming `what` and the process
    that holds it: one writer per output. The lock dies with its process (even under kill -9)."""
    path = Path(path)
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise Busy(
                f"{what} '{path}' is being written by {holder} (lock '{lock}'); wait for it to finish or choose "
                "another path"
            ) from None
        try:
            f.truncate(0)
            f.write(f"adwm process {os.getpid()}")
            f.flush()
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def update_json(path: str | Path, update: Callable[[dict], None]) -> dict:
    """Read the JSON object at `path` ({} if missing), apply `update` to it in place and write it back
    atomically, all under `file_lock(<path>.lock)`, so processes adding their own entries to one file
    never drop another's; returns the object written."""
    path = Path(path)
    with file_lock(path.with_name(path.name + ".lock")):
        obj = read_json(path) if path.is_file() else {}
        update(obj)
        atomic_write_json(path, obj)
    return obj
