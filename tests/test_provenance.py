"""What made a run: a checkout is dirty when tracked code changed, not when a command rewrote its results."""

from __future__ import annotations

import subprocess

import pytest

from adwm.runtime.provenance import is_dirty, module_at


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_a_checkout_is_dirty_by_its_code_not_by_its_generated_results(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "src.py").write_text("x = 1\n")
    (tmp_path / "docs" / "results" / "table.md").write_text("| a |\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    assert not is_dirty(tmp_path)
    (tmp_path / "docs" / "results" / "table.md").write_text("| b |\n")  # a grid rewrote its table
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert not is_dirty(tmp_path)
    (tmp_path / "src.py").write_text("x = 2\n")
    assert is_dirty(tmp_path)


def test_a_module_as_an_older_commit_wrote_it_loads_beside_todays(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "speed.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass Fit:\n    x: int = 1\n"
    )
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old")
    old = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    (tmp_path / "pkg" / "speed.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass Fit:\n    x: int = 2\n"
    )
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "new")
    then = module_at(old, "pkg/speed.py", tmp_path)
    assert then.Fit().x == 1 and then.__name__ == f"speed_at_{old}"
    with pytest.raises(ValueError, match="nosuchcommit:pkg/speed.py: git show failed"):
        module_at("nosuchcommit", "pkg/speed.py", tmp_path)
