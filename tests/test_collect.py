"""`adwm collect`: exact behaviour log-probs, determinism, and resuming after a kill or a torn line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from adwm.data.schema import LogFormatError, read_episodes
from adwm.envs import EnvConfig
from adwm.policies.config import PolicyConfig
from adwm.stages.collect import collect
from adwm.stages.config import BehaviourEntry, CollectConfig


def uniform_cfg(out: Path, n: int) -> CollectConfig:
    return CollectConfig(
        n_episodes=n,
        n_envs=8,
        out=str(out),
        behaviour=[BehaviourEntry(PolicyConfig(name="uniform", kind="uniform"), 1.0)],
    )


def test_uniform_log_has_n_episodes_with_exact_logprobs(tmp_path):
    path = collect(uniform_cfg(tmp_path / "log.jsonl", 20), EnvConfig(), seed=0, progress=False)
    eps = read_episodes(path, privileged=True)
    assert sorted(e.index for e in eps) == list(range(20))
    for e in eps:
        assert e.seed == 2_000_000 + e.index
        for s in e.steps:
            assert s.behavior_logprob == pytest.approx(-np.log(len(s.admissible)))
            assert s.action in s.admissible
        assert e.steps[-1].done


def test_same_seed_same_log(tmp_path):
    a = collect(uniform_cfg(tmp_path / "a.jsonl", 10), EnvConfig(), seed=3, progress=False)
    b = collect(uniform_cfg(tmp_path / "b.jsonl", 10), EnvConfig(), seed=3, progress=False)
    assert sorted(a.read_text().splitlines()) == sorted(b.read_text().splitlines())


def test_torn_last_line_is_cut_and_completed(tmp_path):
    path = tmp_path / "log.jsonl"
    collect(uniform_cfg(path, 6), EnvConfig(), seed=0, progress=False)
    full = sorted(path.read_text().splitlines())
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # crash mid-write
    collect(uniform_cfg(path, 6), EnvConfig(), seed=0, progress=False)
    assert sorted(path.read_text().splitlines()) == full


def test_kill_mid_run_then_rerun_gives_exactly_n(tmp_path, tiny_lm_dir):
    n = 120
    overrides = [
        f"run.root={tmp_path}",
        f"collect.n_episodes={n}",
        "collect.n_envs=4",
        "collect.behaviour=[{policy: {name: tiny, model: '" + tiny_lm_dir + "'}, weight: 1.0}]",
    ]
    log = tmp_path / "collect" / "episodes.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "adwm.cli", "collect", *overrides],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or log.read_text().count("\n") < 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = log.read_text().count("\n")
    assert 5 <= written < n, f"kill came too late or too early ({written} episodes)"

    from adwm.cli import main

    assert main(["collect", *overrides]) == 0
    eps = read_episodes(log, privileged=True)
    assert len(eps) == n and sorted(e.index for e in eps) == list(range(n))
    # the resumed log holds the same episodes an uninterrupted run writes (log-probs up to float
    # round-off: padding differs with the batch an episode shares)
    other = [f"run.root={tmp_path / 'fresh'}", *overrides[1:]]
    assert main(["collect", *other]) == 0
    fresh = {e.index: e for e in read_episodes(tmp_path / "fresh/collect/episodes.jsonl", privileged=True)}
    for e in eps:
        f = fresh[e.index]
        assert (e.policy, e.seed, [s.action for s in e.steps]) == (f.policy, f.seed, [s.action for s in f.steps])
        np.testing.assert_allclose(
            [s.behavior_logprob for s in e.steps], [s.behavior_logprob for s in f.steps], atol=1e-5
        )


@pytest.mark.parametrize(
    "behaviour,message",
    [
        ([], "expected at least one behaviour agent"),
        ([BehaviourEntry(PolicyConfig(name="u", kind="uniform"), 1.0)] * 2, "policy names must be unique"),
        (
            [BehaviourEntry(PolicyConfig(name="u", kind="uniform"), -1.0)],
            r"collect.behaviour\[0\].weight: expected >= 0, got -1.0",
        ),
    ],
)
def test_bad_behaviour_mixture(tmp_path, behaviour, message):
    with pytest.raises(ValueError, match=message):  # checked when the config is made, or by collect
        cfg = CollectConfig(n_episodes=2, out=str(tmp_path / "x.jsonl"), behaviour=behaviour)
        collect(cfg, EnvConfig(), seed=0)


def test_refuses_to_extend_a_log_made_with_other_settings(tmp_path):
    path = tmp_path / "log.jsonl"
    collect(uniform_cfg(path, 4), EnvConfig(), seed=0, progress=False)
    collect(uniform_cfg(path, 6), EnvConfig(), seed=0, progress=False)  # same settings, more episodes: extends
    assert len(read_episodes(path)) == 6
    with pytest.raises(ValueError, match=r"log.jsonl: this log was collected with other settings \(seed\)"):
        collect(uniform_cfg(path, 8), EnvConfig(), seed=1, progress=False)


def test_a_whole_last_episode_without_newline_is_kept_and_a_bad_line_is_never_cut(tmp_path):
    path = tmp_path / "log.jsonl"
    collect(uniform_cfg(path, 4), EnvConfig(), seed=0, progress=False)
    text = path.read_text()
    path.write_text(text.rstrip("\n"))  # e.g. an editor dropped the final newline
    collect(uniform_cfg(path, 4), EnvConfig(), seed=0, progress=False)
    assert path.read_text() == text
    path.write_text(text + '{"schema": "adwm.episode/1"}\n')  # complete but invalid: not a crash artefact
    with pytest.raises(LogFormatError, match=r"log.jsonl:5: missing field 'env'"):
        collect(uniform_cfg(path, 6), EnvConfig(), seed=0, progress=False)
    assert path.read_text().endswith('{"schema": "adwm.episode/1"}\n')  # nothing was cut
