"""Output paths checked before any work: a command that cannot write its results says so at the start,
naming the config key, not after hours of work (or with a raw `IsADirectoryError` at the end)."""

from __future__ import annotations

import os
from pathlib import Path


def _writable_ancestor(path: Path, key: str) -> None:
    """The nearest existing ancestor of `path` is a folder this process can create entries in."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{key}: cannot create '{path}': '{parent}' is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{key}: cannot write into '{parent}' (permission denied); choose a writable path")


def check_output_file(path: str | Path, key: str) -> None:
    """`path` is (or can become) a file this process can replace."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{key}: '{path}' is a folder; expected the path of a file")
    if path.exists() and not os.access(path.parent, os.W_OK | os.X_OK):
        raise ValueError(f"{key}: cannot replace '{path}': its folder is not writable (permission denied)")
    _writable_ancestor(path, key)


def check_output_dir(path: str | Path, key: str) -> None:
    """`path` is (or can become) a folder this process can write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{key}: '{path}' is a file; expected a folder")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{key}: cannot write into '{path}' (permission denied); choose a writable folder")
        return
    _writable_ancestor(path / "x", key)
