"""Checks of config values, one wording for all: `<dotted key>: expected <what is allowed>, got <value>`.

Each config dataclass calls these from `__post_init__`, so every command rejects the same bad value the
same way, at load time, before any work (adwm.config.compose turns the ValueError into a ConfigError).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def _key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def require(ok: bool, key: str, value: Any, expected: str) -> None:
    """Raise `ValueError("<key>: expected <expected>, got <value>")` unless `ok`."""
    if not ok:
        raise ValueError(f"{key}: expected {expected}, got {value!r}")


def at_least(obj: Any, prefix: str, minimum: float, names: Iterable[str], note: str = "") -> None:
    """Each field of `names` is >= `minimum` (`note` says what the bound means, e.g. "0 = no limit")."""
    for name in names:
        value = getattr(obj, name)
        require(value >= minimum, _key(prefix, name), value, f">= {minimum}" + (f" ({note})" if note else ""))


def in_range(obj: Any, prefix: str, names: Iterable[str], low: float = 0.0, high: float = 1.0) -> None:
    """Each field of `names` lies in [low, high]."""
    for name in names:
        value = getattr(obj, name)
        require(low <= value <= high, _key(prefix, name), value, f"a value in [{low:g}, {high:g}]")


def one_of(value: Any, key: str, choices: Iterable[Any]) -> None:
    """`value` is one of `choices`."""
    choices = list(choices)
    require(value in choices, key, value, f"one of {choices}")


def safe_name(value: str, key: str) -> None:
    """A name that becomes one path component under a folder the config owns (an agent, an experiment, a
    cell): no separator, no `..`, not empty, so that it cannot read or write outside that folder."""
    require(
        bool(value) and "/" not in value and "\\" not in value and value not in (".", "..") and "\0" not in value,
        key,
        value,
        "a plain name (no '/', no '..'): it names a folder or file inside the project's own folders",
    )
