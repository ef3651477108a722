"""Every figure under benchmarks/results names the command and the commit that made it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adwm.runtime.provenance import benchmark_stamp, commit, source_root

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def _entries(data: dict) -> list[dict]:
    """A file's result entries: the whole file where it is one result, else each keyed result in it (a list
    of them for repeated measurements)."""
    if "provenance" in data:
        return [data]
    out = []
    for value in data.values():
        out += value if isinstance(value, list) else [value] if isinstance(value, dict) else []
    return out


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_each_result_entry_is_stamped_with_its_command_and_commit(path):
    entries = _entries(json.loads(path.read_text()))
    assert entries, f"{path.name}: no result entries"
    for entry in entries:
        stamp = entry.get("provenance")
        assert stamp is not None, f"{path.name}: an entry without provenance: {sorted(entry)[:6]}"
        assert stamp["command"].startswith("python benchmarks/"), stamp
        assert "commit" in stamp and (stamp["commit"] or stamp.get("note")), stamp  # unknown only with a reason


def test_the_stamp_names_the_script_in_the_checkout_and_its_arguments():
    script = str(source_root() / "benchmarks" / "cost.py")
    stamp = benchmark_stamp([script, "--cell", "builtin", "seed=3", "run.root=runs/a b"])
    assert stamp == {
        "command": "python benchmarks/cost.py --cell builtin seed=3 'run.root=runs/a b'",
        "commit": commit(),
    }
