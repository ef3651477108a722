"""Loading a Lightning checkpoint safely and with a named error.

Every load passes `weights_only=True`: a checkpoint is read as tensors and plain containers only, never
unpickled into arbitrary objects, so a crafted file cannot run code (torch >= 2.6 is required for that
default to be safe; pyproject pins it). A file that is not a checkpoint of the expected kind (a text file,
an empty or truncated file, another module's checkpoint) fails with the config key and the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def load_checkpoint(cls: type[T], path: str | Path, key: str, map_location: str = "cpu") -> T:
    """`cls.load_from_checkpoint(path)` with weights only; errors name `key` and `path`."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{key}: '{path}' is a folder; expected a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"{key}: no checkpoint at '{path}'")
    what = f"{key}: '{path}' is not a readable {cls.__name__} checkpoint"
    if path.stat().st_size == 0:
        raise ValueError(f"{what} (the file is empty)")
    try:
        return cls.load_from_checkpoint(path, map_location=map_location, weights_only=True)  # type: ignore[attr-defined]
    except Exception as err:  # unpickling a text, truncated or crafted file fails in many ways; name the file
        first = (str(err).strip().splitlines() or [""])[0][:160]
        raise ValueError(f"{what} ({type(err).__name__}: {first})") from None
