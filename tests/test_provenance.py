"""What made a run: a checkout is dirty when tracked code changed, not when a command rewrote its results."""

from __future__ import annotations

import subprocess

from adwm.runtime.provenance import is_dirty


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
