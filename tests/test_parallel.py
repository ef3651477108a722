"""Worker processes (adwm.runtime.parallel) and the locked JSON updates that let them share a results file."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

from adwm.runtime.atomic import update_json
from adwm.runtime.parallel import quiet_known_warnings, resolve_workers, run_jobs
from helpers import job_add_entries, job_fails, job_process


def test_jobs_run_in_worker_processes_and_come_back_in_order():
    out = run_jobs([(f"job {k}", job_process, (f"t{k}",)) for k in range(5)], workers=2)
    assert [tag for tag, _, _ in out] == [f"t{k}" for k in range(5)]
    pids = {pid for _, pid, _ in out}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {threads for _, _, threads in out} == {max(1, (os.cpu_count() or 1) // 2)}


def test_one_worker_runs_the_jobs_here():
    out = run_jobs([("a", job_process, ("a",)), ("b", job_process, ("b",))], workers=1)
    assert [pid for _, pid, _ in out] == [os.getpid()] * 2
    assert out[0][2] == torch.get_num_threads()


def test_a_failing_job_raises_its_own_error():
    jobs = [("fine", job_process, ("x",)), ("bad", job_fails, ("collect.n_episodes",))]
    with pytest.raises(ValueError, match="collect.n_episodes: expected a number, got 'lots'"):
        run_jobs(jobs, workers=2)


def test_workers_config_value():
    assert resolve_workers(0) == (os.cpu_count() or 1) and resolve_workers(3) == 3
    with pytest.raises(ValueError, match="workers: expected 0 .* or a number of processes >= 1, got -1"):
        resolve_workers(-1)


def test_processes_adding_entries_to_one_file_lose_none(tmp_path):
    path = tmp_path / "results.json"
    update_json(path, lambda d: d.__setitem__("first", 0))
    run_jobs([(f"writer {p}", job_add_entries, (str(path), p, 25)) for p in "abc"], workers=3)
    stored = json.loads(path.read_text())
    assert set(stored) == {"first"} | {f"{p}{i}" for p in "abc" for i in range(25)}


def test_only_the_known_warnings_are_silenced():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_known_warnings()
        warnings.warn(
            "`isinstance(treespec, LeafSpec)` is deprecated, use TreeSpec.is_leaf()", FutureWarning, stacklevel=1
        )
        warnings.warn(
            "The 'train_dataloader' does not have many workers which may be a bottleneck.", UserWarning, stacklevel=1
        )
        warnings.warn("an unrelated warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["an unrelated warning"]
