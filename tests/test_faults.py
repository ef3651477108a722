"""Crash tests: every long command killed with SIGKILL at several moments (`ADWM_FAULT=<point>:<n>`, see
adwm/runtime/faults.py), then rerun: its outputs equal an uninterrupted run's, with no episode lost or
duplicated; a second writer is refused by name; a killed parent leaves no worker behind.

The fast set covers collect, ground truth, fit (bit-identical resume), project, evaluate and ope on the
smoke config; the `slow` set adds quickstart, grid, a killed worker, two real concurrent collects and a
ScienceWorld JVM killed mid-episode.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from adwm.cli import main
from adwm.data.schema import read_episodes
from adwm.runtime.atomic import exclusive, read_json
from helpers import reads

VOLATILE = {"seconds", "timings", "stage_seconds", "wall_s", "log_mtime", "world_model_mtime", "run_dir"}


def _stable(obj, skip: frozenset = frozenset()):
    """A results object without the wall-clock fields (and mtimes of inputs, and the keys `skip`)."""
    if isinstance(obj, dict):
        return {k: _stable(v, skip) for k, v in obj.items() if k not in VOLATILE | skip}
    if isinstance(obj, list):
        return [_stable(v, skip) for v in obj]
    return obj


def _same(a, b, where: str = "") -> None:
    """Equal results: the same keys and strings, numbers equal up to float round-off (numpy's BLAS may
    sum in another order in another process)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: {a} != {b}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12, nan_ok=True), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _killed(args: list[str], point: str, timeout: float = 600) -> str:
    """Run `adwm <args>` in a child process that SIGKILLs itself at `point`; returns its stderr."""
    env = {**os.environ, "ADWM_FAULT": point, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())  # as many threads as this process: same numbers
    proc = subprocess.run(
        [sys.executable, "-m", "adwm.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point} (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stderr


@pytest.fixture(scope="module")
def made(smoke_run):
    return smoke_run


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every run here on one thread, as the smoke run: a result compared with it must not differ by the
    order of floating-point sums of another thread count (children get the same count, see `_killed`)."""


def _shared(made: Path) -> list[str]:
    """Overrides that read the smoke run's agents, log and world model; each test writes elsewhere."""
    # run.root: where each command's config.yaml goes (every output the tests compare is set explicitly)
    return [*(o for o in reads(made) if not o.startswith(("run.root", "project.dir"))), f"run.root={made}/reruns"]


@pytest.mark.ci
@pytest.mark.parametrize("after", [7, pytest.param(1, marks=pytest.mark.slow)])
def test_collect_killed_then_rerun_equals_uninterrupted(made, tmp_path, after):
    args = ["collect", *_shared(made), f"collect.out={tmp_path}/log.jsonl"]
    _killed(args, f"collect.episode:{after}")
    written = read_episodes(tmp_path / "log.jsonl")
    assert len(written) == after
    assert main(args) == 0
    resumed = read_episodes(tmp_path / "log.jsonl", privileged=True)
    reference = read_episodes(made / "collect" / "episodes.jsonl", privileged=True)
    assert sorted(e.index for e in resumed) == list(range(len(reference)))  # 0 lost, 0 duplicated
    by_index = {e.index: e for e in reference}
    for e in resumed:  # the same episodes (log-probs up to round-off: padding differs with the batch)
        r = by_index[e.index]
        assert (e.policy, e.seed, [s.action for s in e.steps]) == (r.policy, r.seed, [s.action for s in r.steps])
        assert [s.behavior_logprob for s in e.steps] == pytest.approx([s.behavior_logprob for s in r.steps], abs=1e-5)


@pytest.mark.ci
@pytest.mark.parametrize("after", [4, pytest.param(1, marks=pytest.mark.slow)])
def test_ground_truth_killed_then_rerun_equals_uninterrupted(made, tmp_path, after):
    out = tmp_path / "gt.json"
    args = ["ground-truth", *_shared(made), f"ground_truth.out={out}", "workers=1"]
    _killed(args, f"ground_truth.policy:{after}")
    assert len(read_json(out)) == after  # the policies measured before the kill are kept
    assert main(args) == 0
    _same(_stable(read_json(out)), _stable(read_json(made / "ground_truth" / "ground_truth.json")))


@pytest.fixture(scope="module")
def uninterrupted_fit(made, tmp_path_factory):
    """A short fit over several epochs, uninterrupted."""
    out = tmp_path_factory.mktemp("fit_a")
    args = ["fit", *_shared(made), f"run.fit={out}", "fit.max_epochs=4", "fit.encoder_steps=10"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures come before `_one_thread`
    try:
        assert main(args) == 0
    finally:
        torch.set_num_threads(threads)
    return out, args


# before the first epoch ends; mid-run after the encoder froze; late
@pytest.mark.parametrize(
    "after", [30, pytest.param(3, marks=pytest.mark.slow), pytest.param(70, marks=pytest.mark.slow)]
)
@pytest.mark.ci
def test_fit_killed_then_resumed_equals_uninterrupted_bit_for_bit(uninterrupted_fit, tmp_path, after):
    reference, args = uninterrupted_fit
    args = [*args, f"run.fit={tmp_path}"]
    _killed(args, f"fit.step:{after}")
    assert main([*args, "fit.resume=true"]) == 0
    a = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=True)
    b = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert a["global_step"] == b["global_step"]
    assert sorted(a["state_dict"]) == sorted(b["state_dict"])
    different = [k for k in a["state_dict"] if not torch.equal(a["state_dict"][k], b["state_dict"][k])]
    assert different == []
    assert _stable(read_json(tmp_path / "metrics.json")) == _stable(read_json(reference / "metrics.json"))


def test_fit_resume_refuses_a_checkpoint_made_from_other_settings(uninterrupted_fit, tmp_path, capsys):
    _, args = uninterrupted_fit
    args = [*args, f"run.fit={tmp_path}"]
    _killed(args, "fit.step:30")
    before = (tmp_path / "checkpoints" / "last.ckpt").read_bytes()
    assert main([*args, "fit.resume=true", "world_model.denoiser.hidden=32", "data.history=5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fit.resume: the checkpoint" in err
    assert "world_model.denoiser.hidden (64 -> 32)" in err and "data.history (30 -> 5)" in err
    assert (tmp_path / "checkpoints" / "last.ckpt").read_bytes() == before  # nothing written


def test_project_killed_then_rerun_equals_uninterrupted(made, tmp_path):
    args = ["project", *_shared(made), f"project.dir={tmp_path}/project"]
    _killed(args, "project.train:1")
    assert not list((tmp_path / "project").glob("*/settings.json"))  # nothing recorded as done
    assert main(args) == 0
    mine = next((tmp_path / "project").glob("*/projector.ckpt"))
    ref = made / "project" / mine.parent.name / "projector.ckpt"
    a, b = torch.load(ref, weights_only=True)["state_dict"], torch.load(mine, weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_evaluate_killed_then_rerun_equals_uninterrupted(made, tmp_path):
    shared = [*_shared(made), f"project.dir={made}/project", "workers=1"]
    args = ["evaluate", *shared, f"evaluate.out={tmp_path}/killed.json"]
    _killed(args, "evaluate.policy:2")
    assert len(read_json(tmp_path / "killed.json")["estimates"]) == 2
    assert main(args) == 0
    assert main(["evaluate", *shared, f"evaluate.out={tmp_path}/whole.json"]) == 0
    _same(_stable(read_json(tmp_path / "killed.json")), _stable(read_json(tmp_path / "whole.json")))


def test_ope_killed_then_rerun_equals_uninterrupted(made, tmp_path):
    shared = [*_shared(made), f"ope.scores={tmp_path}/scores"]
    args = ["ope", *shared, f"ope.out={tmp_path}/killed.json"]
    _killed(args, "ope.policy:3")
    assert len(read_json(tmp_path / "killed.json")["estimates"]) == 3
    assert main(args) == 0
    assert main(["ope", *shared, f"ope.out={tmp_path}/whole.json"]) == 0
    settings = frozenset({"settings"})  # they name the output file, which differs
    _same(_stable(read_json(tmp_path / "killed.json"), settings), _stable(read_json(tmp_path / "whole.json"), settings))


def test_a_second_writer_of_a_log_or_a_world_model_is_refused_by_name(made, tmp_path, capsys):
    log = tmp_path / "log.jsonl"
    args = ["collect", *_shared(made), f"collect.out={log}"]
    assert main([*args, "collect.n_episodes=3"]) == 0
    capsys.readouterr()
    before = log.read_bytes()
    with exclusive(log, "the episode log"):  # another process writing the log
        assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the episode log '{log}' is being written by adwm process {os.getpid()}" in err
    assert log.read_bytes() == before
    with exclusive(tmp_path / "fit" / "fit", "the world model folder"):
        assert main(["fit", *_shared(made), f"run.fit={tmp_path}/fit"]) == 2
    assert f"the world model folder '{tmp_path}/fit/fit' is being written by" in capsys.readouterr().err
    run = tmp_path / "run"
    with exclusive(run / "quickstart" / "quickstart", "the run folder"):
        assert main(["quickstart", "experiment=smoke", f"run.root={run}"]) == 2
    assert "the run folder" in capsys.readouterr().err and not (run / "agents").exists()


def test_results_only_grow_when_another_agent_is_evaluated_into_the_same_file(made, tmp_path):
    shared = [*_shared(made), f"project.dir={made}/project", "workers=1", "family.eps=[0.5]", "family.off_path=[]"]
    out = tmp_path / "estimates.json"
    other = f"policy.model={made}/agents/iter2"
    assert main(["evaluate", *shared, f"evaluate.out={out}", "policy.name=iter3"]) == 0
    assert main(["evaluate", *shared, f"evaluate.out={out}", "policy.name=iter2", other]) == 0
    results = read_json(out)
    assert set(results["estimates"]) == {"iter3_eps0.5", "iter2_eps0.5"}  # the first agent's entry is kept
    assert results["family"] == ["iter2_eps0.5"]
    ope = [*_shared(made), f"ope.scores={tmp_path}/scores", f"ope.out={tmp_path}/ope.json"]
    assert main(["ope", *ope, "family.eps=[0.5]", "family.off_path=[]"]) == 0
    assert main(["ope", *ope, "family.eps=[0.5]", "family.off_path=[]", "policy.name=iter2", other]) == 0
    assert set(read_json(tmp_path / "ope.json")["estimates"]) == {"iter3_eps0.5", "iter2_eps0.5"}


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_die_with_their_killed_parent(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from helpers import job_sleep
        from adwm.runtime.parallel import run_jobs
        run_jobs([("a", job_sleep, ({str(tmp_path)!r},)), ("b", job_sleep, ({str(tmp_path)!r},))], 2)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 120
    while time.time() < deadline and len(list(tmp_path.glob("*.pid"))) < 2:
        time.sleep(0.1)
    workers = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(workers) == 2 and all(_alive(w) for w in workers)
    parent.kill()
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "orphaned workers"


# -- slow: whole jobs -------------------------------------------------------------------------------------
@pytest.mark.ci
@pytest.mark.slow
@pytest.mark.parametrize("point", ["quickstart.stage:1", "fit.step:15", "quickstart.stage:3"])
def test_quickstart_killed_then_rerun_equals_uninterrupted(made, tmp_path, point):
    args = ["quickstart", "experiment=smoke", f"run.root={tmp_path}"]
    _killed(args, point)
    assert main(args) == 0
    mine, ref = read_json(tmp_path / "quickstart" / "summary.json"), read_json(made / "quickstart" / "summary.json")
    _same(_stable(mine["policies"]), _stable(ref["policies"]))
    _same(_stable(mine["metrics"]), _stable(ref["metrics"]))


@pytest.mark.ci
@pytest.mark.slow
def test_a_killed_worker_fails_the_job_by_name_and_the_rerun_completes(made, tmp_path):
    args = ["quickstart", "experiment=smoke", f"run.root={tmp_path}", "workers=2"]
    env = {**os.environ, "ADWM_FAULT": "worker.job:1", "WANDB_MODE": "disabled"}
    proc = subprocess.run([sys.executable, "-m", "adwm.cli", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "terminated abruptly" in proc.stderr.strip().splitlines()[-1]
    assert main(args) == 0
    mine, ref = read_json(tmp_path / "quickstart" / "summary.json"), read_json(made / "quickstart" / "summary.json")
    assert [p["name"] for p in mine["policies"]] == [p["name"] for p in ref["policies"]]


@pytest.mark.ci
@pytest.mark.slow
def test_grid_killed_after_a_run_then_rerun_equals_uninterrupted(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the runs' processes: as many threads as the killed grid's
    spec = tmp_path / "g.yaml"
    spec.write_text(
        "name: faults\noverrides: [experiment=smoke, 'ope.estimators=[is]']\n"
        "axes:\n  variant:\n    full: []\n    no_guidance: [guidance.omega=0]\nseeds: [0]\n"
        f"out: {tmp_path}/killed\n"
    )
    _killed(["grid", str(spec)], "grid.run:1")
    assert main(["grid", str(spec)]) == 0
    spec.write_text(spec.read_text().replace(f"{tmp_path}/killed", f"{tmp_path}/whole"))
    assert main(["grid", str(spec)]) == 0
    assert (tmp_path / "killed" / "metrics.csv").read_text() == (tmp_path / "whole" / "metrics.csv").read_text()


@pytest.mark.ci
@pytest.mark.slow
def test_two_concurrent_collects_write_each_episode_once(made, tmp_path):
    log = tmp_path / "log.jsonl"
    args = [sys.executable, "-m", "adwm.cli", "collect", *_shared(made), f"collect.out={log}", "collect.n_envs=2"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    # the first collects for minutes; the second starts while it holds the log
    first = subprocess.Popen([*args, "collect.n_episodes=2000"], env=env, stderr=subprocess.DEVNULL)
    lock = Path(f"{log}.lock")
    deadline = time.time() + 120
    while time.time() < deadline and not (lock.is_file() and lock.read_text()):
        time.sleep(0.05)
    second = subprocess.run([*args, "collect.n_episodes=10"], env=env, capture_output=True, text=True)
    running = first.poll() is None
    first.kill()
    first.wait()
    assert running and second.returncode == 2, second.stderr[-500:]
    assert f"is being written by adwm process {first.pid}" in second.stderr.strip().splitlines()[-1]
    episodes = read_episodes(log)
    indices = [e.index for e in episodes]
    assert len(indices) == len(set(indices))  # the second writer added nothing


@pytest.mark.ci
@pytest.mark.slow
def test_scienceworld_jvm_killed_mid_episode_is_retried_and_the_log_stays_valid(tmp_path):
    pytest.importorskip("scienceworld")
    from shutil import which

    if which("java") is None:
        pytest.skip("java is not installed")
    log = tmp_path / "log.jsonl"
    args = [
        "collect",
        "env=scienceworld",
        "experiment=smoke",
        "policy=uniform",
        f"run.root={tmp_path}",
        f"collect.out={log}",
        "collect.n_episodes=3",
        "collect.n_envs=1",
        "env.max_steps=8",
        "collect.behaviour=[{policy: {name: uniform, kind: uniform}, weight: 1.0}]",
    ]
    env = {**os.environ, "ADWM_FAULT": "scienceworld.call:6", "WANDB_MODE": "disabled"}
    proc = subprocess.run([sys.executable, "-m", "adwm.cli", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "JVM died" in proc.stderr  # the episode was replayed, not cut
    episodes = read_episodes(log)
    assert sorted(e.index for e in episodes) == [0, 1, 2]
    meta = json.loads(Path(f"{log}.meta.json").read_text())
    assert meta["settings"]["env"]["name"] == "scienceworld"
