"""Model sources: a local folder or a Hugging Face hub name, checked before anything is loaded."""

from __future__ import annotations

from pathlib import Path


def is_local_path(name: str) -> bool:
    """A hub name is `org/model`; anything rooted, deeper, or under an existing folder is a path."""
    if name.startswith((".", "/", "~")) or name.count("/") >= 2:
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


def check_model_source(model: str, where: str) -> None:
    """Fail early, naming the config key, for an empty name or a missing local path."""
    if not model:
        raise ValueError(f"{where}: no model given (expected a local directory or a Hugging Face name)")
    if is_local_path(model) and not Path(model).expanduser().exists():
        raise FileNotFoundError(
            f"{where}: model path '{model}' does not exist (expected a directory saved with save_pretrained)"
        )
