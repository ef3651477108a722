"""Bad input, as a hostile but fair user gives it: every case is a one-line error (exit 2) that names the
culprit (the dotted config key, the file and line, or the path) and what is expected, and nothing already
written changes. The commands run against a finished smoke run whose outputs they would write to."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from pathlib import Path

import pytest

from adwm.cli import main
from helpers import reads

# (case id, command, overrides (`{run}`: the smoke run, `{files}`: the prepared bad files), expected regex)
CASES = [
    # sizes and ranges of every stage, at load time
    ("collect-n-episodes-0", "collect", ["collect.n_episodes=0"], r"collect.n_episodes: expected >= 1, got 0"),
    ("collect-n-episodes-neg", "collect", ["collect.n_episodes=-5"], r"collect.n_episodes: expected >= 1, got -5"),
    ("collect-n-envs-0", "collect", ["collect.n_envs=0"], r"collect.n_envs: expected >= 1, got 0"),
    ("gt-n-episodes-0", "ground-truth", ["ground_truth.n_episodes=0"], r"ground_truth.n_episodes: expected >= 1"),
    ("gt-n-envs-0", "ground-truth", ["ground_truth.n_envs=0"], r"ground_truth.n_envs: expected >= 1, got 0"),
    ("gt-eps", "ground-truth", ["policy.eps=1.5"], r"policy.eps: expected a value in \[0, 1\], got 1.5"),
    ("omega-neg", "evaluate", ["guidance.omega=-1"], r"guidance.omega: expected >= 0, got -1.0"),
    ("eta-neg", "evaluate", ["guidance.eta=-0.5"], r"guidance.eta: expected >= 0, got -0.5"),
    (
        "guidance-steps-0",
        "evaluate",
        ["guidance.eta=1", "guidance.steps=0"],
        r"guidance.steps: expected .*>= 1 .*eta=1.0",
    ),
    ("horizon-neg", "evaluate", ["evaluate.simulate.horizon=-3"], r"evaluate.simulate.horizon: expected >= 0"),
    ("n-rollouts-0", "evaluate", ["evaluate.simulate.n_rollouts=0"], r"evaluate.simulate.n_rollouts: expected >= 1"),
    ("calibration", "evaluate", ["evaluate.calibration=affine"], r"evaluate.calibration: expected one of"),
    ("max-minutes-0", "fit", ["fit.max_minutes=0"], r"fit.max_minutes: expected a wall-clock cap > 0, got 0.0"),
    ("batch-size-0", "fit", ["data.batch_size=0"], r"data.batch_size: expected >= 1, got 0"),
    ("val-fraction-1", "fit", ["data.val_fraction=1"], r"data.val_fraction: expected a share in \[0, 1\), got 1"),
    ("n-latents-0", "fit", ["encoder.n_latents=0"], r"encoder.n_latents: expected >= 1, got 0"),
    ("heads-divisor", "fit", ["encoder.heads=3"], r"encoder.heads: expected a divisor of encoder.d_model \(32\)"),
    ("sampler-steps", "fit", ["world_model.sampler.steps=500"], r"world_model.sampler.steps: expected 1..20"),
    ("gamma-0", "ope", ["env.gamma=0"], r"env.gamma: expected a discount in \(0, 1\], got 0"),
    ("workers-neg", "ground-truth", ["workers=-1"], r"workers: expected 0 \(one per CPU core\)"),
    ("accelerator", "fit", ["trainer.accelerator=tpu"], r"trainer.accelerator: expected one of \['cpu'"),
    ("env-name", "collect", ["env.name=nope"], r"env.name: expected one of \['builtin', 'scienceworld'"),
    ("noise", "train-agent", ["agent.variants.iter1.noise=2"], r"agent.variants.iter1.noise: expected a value"),
    ("min-rooms", "collect", ["env.builtin.min_rooms=1"], r"env.builtin.min_rooms: expected 2..max_rooms \(5\)"),
    ("max-rooms-keys", "collect", ["env.builtin.max_rooms=6"], r"env.builtin.max_rooms: expected <= 5 while doors"),
    ("estimator", "ope", ["ope.estimators=[is,magic]"], r"magic"),
    # names and paths that would leave their folders, or point at the wrong kind of thing
    ("agent-name-escape", "train-agent", ["agent.name=../../x"], r"agent.name: expected a plain name"),
    ("experiment-escape", "collect", ["experiment=../env/builtin"], r"experiment: expected a plain name"),
    ("group-escape", "collect", ["env=../../etc"], r"command line: env: expected a plain name"),
    ("cell-escape", "benchmark", ["benchmark.cells=[{{name: ../x}}]"], r"benchmark.cells\[0\].name: expected a plain"),
    ("wm-mismatch", "evaluate", ["evaluate.world_model={files}/other.ckpt"], r"evaluate.world_model: expected the"),
    ("out-is-folder", "collect", ["collect.out={files}"], r"collect.out: '.*' is a folder; expected the path of a"),
    ("out-under-file", "ground-truth", ["ground_truth.out={files}/a_file/gt.json"], r"ground_truth.out: cannot"),
    ("log-is-folder", "fit", ["data.log={files}", "run.fit={files}/fit"], r"data.log: episode log '.*' is a folder"),
    (
        "log-missing",
        "fit",
        ["data.log={files}/none.jsonl", "run.fit={files}/fit"],
        r"data.log: episode log .*none.jsonl' does not exist",
    ),
    ("log-not-utf8-fit", "fit", ["data.log={files}/latin1.jsonl", "run.fit={files}/fit"], r"latin1.jsonl:3: not UTF-8"),
    ("log-not-utf8-ope", "ope", ["ope.log={files}/latin1.jsonl"], r"latin1.jsonl:3: not UTF-8"),
    (
        "log-other-env-fit",
        "fit",
        ["data.log={files}/other_env.jsonl", "run.fit={files}/fit"],
        r"other_env.jsonl:2: field",
    ),
    ("log-other-env-ope", "ope", ["ope.log={files}/other_env.jsonl"], r"other_env.jsonl:2: field 'env': .*'textworld'"),
    ("log-bad-json", "fit", ["data.log={files}/bad_json.jsonl", "run.fit={files}/fit"], r"bad_json.jsonl:2: "),
    # list elements on the command line
    ("list-weight", "collect", ["collect.behaviour[0].weight=-1"], r"collect.behaviour\[0\].weight: expected >= 0"),
    ("list-eps", "collect", ["collect.behaviour[1].policy.eps=2"], r"collect.behaviour\[1\].policy.eps: expected"),
    ("list-unknown-key", "collect", ["collect.behaviour[0].eps=1"], r"unknown config key 'collect.behaviour\[0\].eps'"),
    ("list-index", "collect", ["collect.behaviour[7].weight=1"], r"'collect.behaviour\[7\].weight'.*has 3 entries"),
    (
        "list-model",
        "collect",
        ["collect.behaviour[0].policy.model={files}/no_weights", "collect.out={files}/new/log.jsonl"],
        r"collect.behaviour\[0\].policy.model: '.*' holds no",
    ),
    # checkpoints and agents
    ("ckpt-text", "evaluate", ["run.fit={files}/text"], r"evaluate.world_model: '.*last.ckpt' is not a readable"),
    ("ckpt-empty", "evaluate", ["run.fit={files}/empty"], r"is not a readable WorldModelModule checkpoint \(the file"),
    (
        "ckpt-foreign",
        "evaluate",
        ["run.fit={files}/foreign"],
        r"not a readable WorldModelModule checkpoint \(TypeError",
    ),
    ("ckpt-pickle", "evaluate", ["run.fit={files}/pickle"], r"not a readable WorldModelModule checkpoint"),
    (
        "agent-no-weights",
        "ground-truth",
        ["policy.model={files}/no_weights"],
        r"family policy 'iter3_eps0'.model: '.*' holds no model",
    ),
    ("pkg-resolver", "collect", ["policy.model=${{pkg_path:os}}"], r"expected one of the model packages"),
    ("unknown-choice", "collect", ["policy=best"], r"unknown choice 'best' for group 'policy'"),
]


@pytest.fixture(scope="module")
def files(smoke_run, tmp_path_factory) -> Path:
    """Bad files beside a good log: text, empty, foreign and malicious checkpoints, broken logs."""
    d = tmp_path_factory.mktemp("bad_files")
    log = (smoke_run / "collect" / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    (d / "latin1.jsonl").write_bytes(
        b"".join(log[:2]) + log[2].replace(b"You are", b"Vous \xeates") + b"".join(log[3:])
    )
    (d / "other_env.jsonl").write_bytes(log[0] + log[1].replace(b'"env":"builtin"', b'"env":"textworld"'))
    (d / "bad_json.jsonl").write_bytes(log[0] + b'{"schema": "adwm.episode/1", "env": \n')
    (d / "a_file").write_text("not a folder")
    (d / "no_weights").mkdir()
    (d / "no_weights" / "config.json").write_text("{}")
    for name in ("text", "empty", "foreign", "pickle"):
        (d / name / "checkpoints").mkdir(parents=True)
    (d / "text" / "checkpoints" / "last.ckpt").write_text("this is not a checkpoint\n")
    (d / "empty" / "checkpoints" / "last.ckpt").write_bytes(b"")
    foreign = next((smoke_run / "project").glob("*/projector.ckpt"))
    shutil.copy(foreign, d / "foreign" / "checkpoints" / "last.ckpt")
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {d}/pwned",))

    (d / "pickle" / "checkpoints" / "last.ckpt").write_bytes(pickle.dumps({"state_dict": Boom()}))
    return d


def _digest(root: Path) -> dict[str, str]:
    """Every file under `root` (lock files aside) and the hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


@pytest.mark.parametrize("case,command,overrides,pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_named_one_line_error_and_changes_nothing(
    smoke_run, files, capsys, case, command, overrides, pattern
):
    before, before_files = _digest(smoke_run), _digest(files)
    args = [o.format(run=smoke_run, files=files) for o in overrides]
    assert main([command, *reads(smoke_run), *args]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"adwm {command}: error: ")
    assert re.search(pattern, lines[0]), lines[0]
    assert _digest(smoke_run) == before  # nothing already written changed
    assert _digest(files) == before_files
    assert not (files / "pwned").exists()  # a crafted checkpoint never runs code


def test_a_crafted_checkpoint_never_runs_code_even_when_torch_is_told_to_unpickle(
    smoke_run, files, capsys, monkeypatch
):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # overrides only loads that do not ask
    assert main(["evaluate", *reads(smoke_run), f"run.fit={files}/pickle"]) == 2
    assert "not a readable WorldModelModule checkpoint" in capsys.readouterr().err
    assert not (files / "pwned").exists()


def test_the_suite_has_at_least_forty_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("command,key", [("ground-truth", "ground_truth.out"), ("evaluate", "evaluate.out")])
def test_a_read_only_output_folder_fails_before_any_work(smoke_run, tmp_path, capsys, command, key):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert main([command, *reads(smoke_run), f"{key}={ro}/out.json"]) == 2
    finally:
        ro.chmod(0o755)
    assert f"{key}: cannot write into '{ro}' (permission denied)" in capsys.readouterr().err
    assert not any(ro.iterdir())


def test_a_full_disk_is_a_named_error_and_keeps_the_results_file(smoke_run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "gt.json"
    shutil.copy(smoke_run / "ground_truth" / "ground_truth.json", out)
    before = out.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    # one policy less than measured: the stage must write the file again, and the disk is full
    args = [*reads(smoke_run), f"ground_truth.out={out}", "ground_truth.n_episodes=5", "family.eps=[0.5]"]
    assert main(["ground-truth", *args, "family.off_path=[]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "No space left on device" in err
    assert out.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no partial file left behind


def test_results_files_are_strict_json_and_readable_per_umask(smoke_run):
    import json

    for path in [smoke_run / "ope" / "estimates.json", smoke_run / "quickstart" / "estimates.json"]:
        text = path.read_text()
        json.loads(text, parse_constant=lambda c, where=path: pytest.fail(f"{where}: bare {c}"))
        mask = os.umask(0)
        os.umask(mask)
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask
