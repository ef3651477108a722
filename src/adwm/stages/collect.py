"""`adwm collect`: behaviour logs from a weighted mixture of agents, resumable.

Episode i always gets environment seed `seed_offset + i`, a behaviour agent
drawn from the mixture with generator `(seed, i)` and action sampling seeded
by `(seed, i, 1)`, so an interrupted run, rerun, writes exactly the episodes
that are missing, and the same ones it would have written uninterrupted.
Each finished episode is appended as one line, flushed and fsynced; a torn
last line left by a crash is cut off before resuming.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from adwm.data.play import EpisodeJob, run_episodes
from adwm.data.schema import Episode, LogFormatError, parse_episode
from adwm.envs.registry import EnvConfig, env_signature, make_env
from adwm.policies.factory import build_policy
from adwm.policies.loading import model_fingerprint
from adwm.runtime.atomic import atomic_write_json, exclusive
from adwm.runtime.cache import StageRecord
from adwm.runtime.faults import reached
from adwm.runtime.hub import check_model_source
from adwm.runtime.progress import bar, say
from adwm.stages.config import CollectConfig


def repair_and_scan(path: Path) -> set[int]:
    """Cut a torn last line (no newline: a write a crash interrupted), then return the episode
    indices already in the log. Any other bad line is not a crash artefact: it raises, and the
    file is left as it is.
    """
    if not path.exists():
        return set()
    data = path.read_bytes()
    lines = data.split(b"\n")
    keep_bytes = len(data)
    if lines and lines[-1]:  # no newline at the end: a torn write, unless it is a whole episode
        try:
            parse_episode(lines[-1].decode(), f"{path}:{len(lines)}")
            with path.open("ab") as f:
                f.write(b"\n")
        except (LogFormatError, UnicodeDecodeError):
            keep_bytes -= len(lines[-1])
            lines = lines[:-1]
    done: set[int] = set()
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            ep = parse_episode(raw.decode(), f"{path}:{n}")
        except UnicodeDecodeError:
            raise LogFormatError(f"{path}:{n}: not UTF-8 text") from None
        if ep.index is None or ep.index in done:
            raise LogFormatError(
                f"{path}:{n}: field 'index': missing or duplicated ({ep.index}); not a log written by adwm collect"
            )
        done.add(ep.index)
    if keep_bytes < len(data):
        with path.open("r+b") as f:
            f.truncate(keep_bytes)
    return done


def _check_settings(out: Path, settings: dict) -> None:
    """Refuse to extend a log collected with other settings; record them for a new log."""
    record = StageRecord(out.with_name(out.name + ".meta.json"))
    changed = record.changed(settings)
    if changed:
        raise ValueError(
            f"{out}: this log was collected with other settings ({', '.join(changed)}); "
            "choose another collect.out or delete the log"
        )
    if record.load() is None and not out.exists():
        record.save(settings)


def collect(cfg: CollectConfig, env_cfg: EnvConfig, seed: int, progress: bool = True) -> Path:
    """Append episodes to `cfg.out` until it holds `cfg.n_episodes`; returns the log path."""
    began = time.time()
    names = [b.policy.name for b in cfg.behaviour]
    if len(set(names)) != len(names):
        raise ValueError(f"collect.behaviour: policy names must be unique, got {names}")
    weights = np.array([b.weight for b in cfg.behaviour], dtype=float)  # checked by CollectConfig
    for k, b in enumerate(cfg.behaviour):  # before anything is written: a missing agent is named first
        if b.policy.kind == "llm":
            check_model_source(b.policy.model, f"collect.behaviour[{k}].policy.model")
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(out, "the episode log"):  # a second collect on this log fails, not duplicates
        _check_settings(
            out,
            {
                "behaviour": [asdict(b) for b in cfg.behaviour],
                "weights": {b.policy.name: model_fingerprint(b.policy.model) for b in cfg.behaviour},
                "seed": seed,
                "seed_offset": cfg.seed_offset,
                "env": env_signature(env_cfg),
            },
        )
        done = repair_and_scan(out)
        weights = weights / weights.sum()
        jobs = []
        for i in range(cfg.n_episodes):
            if i in done:
                continue
            pick = int(np.random.default_rng([seed, i]).choice(len(names), p=weights))
            jobs.append(EpisodeJob(i, cfg.seed_offset + i, (seed, i, 1), names[pick]))
        if not jobs:
            return out
        needed = {j.policy for j in jobs}
        policies = {
            b.policy.name: build_policy(b.policy, f"collect.behaviour[{k}].policy")
            for k, b in enumerate(cfg.behaviour)
            if b.policy.name in needed
        }
        start, count = time.time(), [0]
        with out.open("a") as f, bar(len(jobs), f"collect {out.name}", "episode") as shown:

            def write(ep: Episode) -> None:
                f.write(ep.to_json() + "\n")
                f.flush()
                os.fsync(f.fileno())
                count[0] += 1
                shown.update(1)
                reached("collect.episode")
                if progress and (count[0] % 50 == 0 or count[0] == len(jobs)):
                    rate = count[0] / (time.time() - start)
                    say(f"collect: {len(done) + count[0]}/{cfg.n_episodes} episodes ({rate:.1f}/s)")

            run_episodes(lambda: make_env(env_cfg), policies, jobs, write, cfg.n_envs, record_logprob=True)
        spent = seconds_spent(out) + time.time() - began  # across resumed runs
        atomic_write_json(_seconds_path(out), {"seconds": round(spent, 1)})
    return out


def _seconds_path(log: Path) -> Path:
    return log.with_name(log.name + ".seconds.json")


def seconds_spent(log: str | Path) -> float:
    """Seconds spent collecting the log so far, summed over resumed runs (0 if not recorded)."""
    path = _seconds_path(Path(log))
    return float(json.loads(path.read_text())["seconds"]) if path.is_file() else 0.0
