"""CI runs the slow tests marked `ci` (.ci/run); a renamed or unmarked test must not leave it silently empty."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_ci_marker_selects_slow_tests_of_several_files():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow and ci", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    files = {i.split("::")[0] for i in ids}
    assert len(ids) >= 10 and len(files) >= 5, done.stdout[-2000:]


def test_ci_runs_the_marked_selection():
    assert "-m 'slow and ci'" in (ROOT / ".ci" / "run").read_text()
