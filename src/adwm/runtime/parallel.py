"""Independent jobs of a stage (agents, ground-truth policies, estimates, baselines) in worker processes.

On a small CPU, one process per core, each running torch on its own share of the
cores, gets more done than one process using all of them: the models here are
small, so much of a multi-threaded op is synchronisation (docs/decisions.md:
worker processes).

A job is a picklable top-level function and its arguments; workers start fresh
interpreters (`spawn`), never forked copies of a process that holds torch threads.
Results come back in job order and an error in a job is raised here, as it would
be in one process. Jobs that share a results file write it with
`adwm.runtime.atomic.update_json`.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from adwm.runtime.faults import reached
from adwm.runtime.progress import SLOT_ENV, bar, say

Job = tuple[str, Callable[..., Any], tuple]  # (label, function, arguments)
PARENT_ENV = "ADWM_PARENT_PID"  # set for a child `adwm` process (a grid's run): it exits when that pid ends


def resolve_workers(workers: int) -> int:
    """`workers` (the config key): 0 = one per CPU core; else at least 1."""
    if workers < 0:
        raise ValueError(f"workers: expected 0 (one per CPU core) or a number of processes >= 1, got {workers}")
    return workers or (os.cpu_count() or 1)


def quiet_known_warnings() -> None:
    """Silence warnings that say nothing to a user of adwm: Lightning's advice on DataLoader workers (the
    logs are in memory) and its own use of a torch API that newer torch deprecates."""
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")


def _die_with(parent: int, from_main_thread: bool) -> None:
    """Exit this worker as soon as `parent` is gone (killed with -9, its pool never tells the workers)."""
    # the kernel's signal on the parent's death, immediate; it fires when the *thread* that started the
    # worker ends, so only for pools started from the main thread
    if sys.platform.startswith("linux") and from_main_thread:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)

    watch_parent(parent)


def watch_parent(parent: int) -> None:
    """Exit this process (os._exit: at once, no cleanup) within a second of `parent` ending: a child of a
    killed process never runs on as an orphan. Everywhere, and for a parent that died before prctl."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="adwm-parent-watch", daemon=True).start()


def _init_worker(threads: int, parent: int, from_main_thread: bool, pool_size: int) -> None:
    import torch

    _die_with(parent, from_main_thread)
    # this worker's line for progress bars, below the parent's bar of jobs (workers are named <kind>-<k>)
    k = multiprocessing.current_process().name.rsplit("-", 1)[-1]
    os.environ[SLOT_ENV] = str((int(k) - 1) % pool_size + 1 if k.isdigit() else 1)
    torch.set_num_threads(threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as the CLI: never fetch weights at run time
    quiet_known_warnings()


def _job(fn: Callable[..., Any], args: tuple) -> Any:
    reached("worker.job")
    return fn(*args)


def run_jobs(jobs: Sequence[Job], workers: int) -> list[Any]:
    """Run `jobs`, at most `workers` at a time (1: one after another in this process); returns their
    results in order. Jobs start in the given order, so put the longest first."""
    if workers <= 1 or len(jobs) <= 1:
        return [fn(*args) for _, fn, args in jobs]
    n = min(workers, len(jobs))
    threads = max(1, (os.cpu_count() or 1) // n)
    ctx = multiprocessing.get_context("spawn")
    init = (threads, os.getpid(), threading.current_thread() is threading.main_thread(), n)
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_init_worker, initargs=init) as pool:
        futures = {pool.submit(_job, fn, args): label for label, fn, args in jobs}
        with bar(len(jobs), f"jobs ({n} workers)", "job") as progress:
            for future in as_completed(futures):
                if future.exception() is not None:
                    say(f"worker job '{futures[future]}' failed")
                    for f in futures:
                        f.cancel()
                    raise future.exception()
                progress.set_postfix_str(f"done: {futures[future]}", refresh=False)
                progress.update(1)
    return [f.result() for f in futures]
