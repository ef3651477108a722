"""Progress: bars on stderr for the long stages, workers included, and stdout kept for results."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from adwm.runtime.progress import bar


def test_bars_draw_on_request_and_stay_off_a_log_file(capsys, monkeypatch):
    monkeypatch.setenv("ADWM_PROGRESS", "1")
    with bar(3, "simulate p", "step") as shown:
        shown.update(3)
    err = capsys.readouterr().err
    assert "simulate p: 100%" in err and "3/3" in err
    monkeypatch.delenv("ADWM_PROGRESS")  # not a terminal (pytest captures stderr): nothing drawn
    with bar(3, "quiet", "step") as shown:
        shown.update(3)
    assert "quiet" not in capsys.readouterr().err


def test_ground_truth_in_workers_shows_jobs_and_numbers_policies_in_the_family(smoke_run, tmp_path):
    env = {**os.environ, "ADWM_PROGRESS": "1", "WANDB_MODE": "disabled"}
    cmd = [
        sys.executable,
        "-m",
        "adwm.cli",
        "ground-truth",
        "experiment=smoke",
        f"agent.dir={smoke_run / 'agents'}",
        f"ground_truth.out={tmp_path / 'gt.json'}",
        "ground_truth.n_episodes=2",
        "workers=2",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "jobs (2 workers)" in err and "7/7" in err  # the parent's bar of finished jobs
    assert "ground truth iter3_eps0.25:" in err and "| 0/2 [" in err  # a worker's bar of its policy's episodes
    numbered = sorted(int(k) for k in re.findall(r"ground-truth \[(\d+)/7\]", err))
    assert numbered == list(range(1, 8))  # numbered in the family, not [1/1] in every worker
    assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / "gt.json")  # the result path, last
