"""Model sources: a local folder or a Hugging Face hub name, checked before anything is loaded."""

from __future__ import annotations

from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def is_local_path(name: str) -> bool:
    """A hub name is `org/model`; anything rooted, deeper, or under an existing folder is a path."""
    if name.startswith((".", "/", "~")) or name.count("/") >= 2:
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


def check_model_source(model: str, where: str) -> None:
    """Fail early, naming the config key, for an empty name or a missing local path."""
    if not model:
        raise ValueError(f"{where}: no model given (expected a local directory or a Hugging Face name)")
    path = Path(model).expanduser()
    if is_local_path(model) and not path.exists():
        raise FileNotFoundError(
            f"{where}: model path '{model}' does not exist (expected a directory saved with save_pretrained)"
        )
    if path.is_file():
        raise ValueError(f"{where}: '{model}' is a file; expected a model directory (a GGUF file: gguf_file)")
    if path.is_dir() and not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir()):
        raise FileNotFoundError(
            f"{where}: '{model}' holds no model weights (expected model.safetensors, pytorch_model.bin or a "
            ".gguf file, as save_pretrained writes them; `adwm train-agent` makes the built-in agents)"
        )
