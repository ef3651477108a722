"""Devices by config: `cpu`, `cuda`, `cuda:<k>`, `mps`, or `auto` (a GPU when one is present)."""

from __future__ import annotations

DEVICES = ("cpu", "cuda", "mps", "auto")


def check_device(name: str, key: str) -> None:
    """A config value that names a device (light: checked without importing torch)."""
    kind, _, index = name.partition(":")
    if kind not in DEVICES or (index and not (kind == "cuda" and index.isdigit())):
        raise ValueError(f"{key}: expected one of {list(DEVICES)} or cuda:<index>, got '{name}'")


def resolve_device(name: str, key: str):
    """The torch device `name` stands for on this machine; a GPU asked for but absent is a named error."""
    import torch

    check_device(name, key)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"{key}={name}: no CUDA device is available here (use cpu or auto)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"{key}={name}: no MPS device is available here (use cpu or auto)")
    return torch.device(name)
