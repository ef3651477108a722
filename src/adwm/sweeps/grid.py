"""`adwm grid experiments/<grid>.yaml`: the cartesian product of override lists (plus seeds), run in
sequence or in worker processes, finished runs skipped on a rerun, results aggregated into one table.

A grid file::

    name: ablations                  # W&B group and output folder (runs/grid/<name>)
    overrides: [fit.max_minutes=2]   # applied to every run
    axes:                            # each axis: named values, each a list of overrides
      variant:
        full: []
        no_action_guidance: [guidance.omega=0]
    seeds: [0, 1, 2]
    workers: 1
    report: docs/results/builtin.md  # optional: a copy of the table

Each run is the main job (`adwm quickstart`) in its own process, logging to `<run>/log.txt`. Runs share
what does not depend on their differences: agents, behaviour logs and ground truth per seed and upstream
settings; the world model, projectors and baselines per fit settings (so ablations of the estimator
reuse one world model). Stages that share a folder never run at the same time. With `logger=wandb` (in
the grid's overrides) each run's stages and its results are W&B runs by its `logger` settings (project,
entity, mode: offline by default; WANDB_MODE wins) with group = grid name and tags from the labels and
axis overrides; the results run holds the resolved config, the metrics, the J-vs-J_hat table and plot.
`wandb sync <run>/**/wandb/offline-run-*` uploads later.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from adwm.runtime.cache import StageRecord
from adwm.runtime.faults import reached
from adwm.runtime.parallel import PARENT_ENV
from adwm.runtime.progress import bar, say
from adwm.sweeps.tables import write_report


@dataclass
class GridSpec:
    name: str
    axes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0])
    workers: int = 1
    out: str = ""  # default runs/grid/<name>
    report: str | None = None  # a copy of the table (e.g. docs/results/<env>.md)
    ci_resamples: int = 2000
    ci_level: float = 0.95
    title: str | None = None  # the table's heading (default: Grid `<name>`)
    command: str | None = None  # the command that regenerates the table, quoted in it (default: adwm grid <name>)
    note: str | None = None  # said under the table's heading (e.g. which part of a benchmark it holds)
    alone: dict[str, str] = field(default_factory=dict)  # a benchmark's cell -> the command that runs it alone


@dataclass
class Run:
    id: str
    labels: dict  # axis -> value name, plus seed
    overrides: list[str]
    root: Path
    tags: list[str] = field(default_factory=list)  # W&B tags: the labels and the axis overrides
    data_key: str = ""  # runs with equal keys share agents, logs, ground truth
    fit_key: str = ""  # ... and the world model, projectors and baselines
    fit_dir: Path | None = None  # the world model's folder (run.fit), shared by the runs of one fit key


def load_spec(path: str | Path) -> GridSpec:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"grid file '{path}' does not exist")
    try:
        raw = OmegaConf.load(path)
        spec = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GridSpec), raw))
    except OmegaConfBaseException as err:
        raise ValueError(f"{path}: {str(err).splitlines()[0]} (keys: {list(GridSpec.__dataclass_fields__)})") from None
    if not spec.seeds:
        raise ValueError(f"{path}: seeds: expected at least one seed")
    if spec.workers < 1:
        raise ValueError(f"{path}: workers: expected >= 1, got {spec.workers}")
    for axis, values in spec.axes.items():
        if not values:
            raise ValueError(f"{path}: axes.{axis}: expected at least one named value")
    spec.out = spec.out or f"runs/grid/{spec.name}"
    return spec


def _hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def expand(spec: GridSpec) -> list[Run]:
    """Every combination of axis values and seeds, with the folders of what its runs share."""
    from adwm.config import load_config
    from adwm.envs.registry import env_signature

    out = Path(spec.out)
    axes = list(spec.axes.items())
    runs = []
    for combo in itertools.product(*[list(values.items()) for _, values in axes]):
        for seed in spec.seeds:
            labels = {axis: name for (axis, _), (name, _) in zip(axes, combo)} | {"seed": seed}
            ovr = [*spec.overrides, *[o for _, (_, os_) in zip(axes, combo) for o in os_], f"seed={seed}"]
            rid = "-".join([*(name for _, (name, _) in zip(axes, combo)), f"seed{seed}"])
            root = out / "runs" / rid
            cfg = load_config([*ovr, f"run.root={root}"], "quickstart")
            # keys of what runs may share: the config without the run's own folder in any path
            c = json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True)).replace(str(root), "<run>"))
            c["env"] = env_signature(c["env"])
            data_key = _hash({k: c[k] for k in ("seed", "env", "agent", "policy", "collect", "family", "ground_truth")})
            fit = {k: c[k] for k in ("data", "encoder", "world_model", "fit")} | {
                "joint": c["ablation"]["joint_encoder"]
            }
            fit_key = _hash({"upstream": data_key, **fit})
            shared = out / "shared" / f"seed{seed}-{data_key}"
            fit_dir = shared / f"fit-{fit_key}"
            ovr += [
                f"run.root={out / 'runs' / rid}",
                f"agent.dir={shared / 'agents'}",
                f"collect.out={shared / 'collect' / 'episodes.jsonl'}",
                f"ground_truth.out={shared / 'ground_truth' / 'ground_truth.json'}",
                f"run.fit={fit_dir}",
                f"project.dir={fit_dir / ('project-' + _hash(c['projector']))}",
                f"ope.out={fit_dir / ('ope-' + _hash(c['ope'])) / 'estimates.json'}",
                f"ope.scores={shared / 'ope_scores'}",
            ]
            axis_ovr = [o for _, (_, os_) in zip(axes, combo) for o in os_]
            tags = list(dict.fromkeys([f"{k}={v}" for k, v in labels.items()] + axis_ovr))
            runs.append(Run(rid, labels, ovr, out / "runs" / rid, [t[:64] for t in tags], data_key, fit_key, fit_dir))
    return runs


def _record(run: Run) -> StageRecord:
    """A grid run's stage record: the overrides it ran with, beside its summary."""
    return StageRecord(run.root / "grid_run.json", [run.root / "quickstart" / "summary.json"])


def _finished(run: Run) -> bool:
    return _record(run).matches(run.overrides)


def _execute(run: Run, spec: GridSpec) -> dict:
    """One run in its own process; its log goes to <run>/log.txt."""
    run.root.mkdir(parents=True, exist_ok=True)
    say(f"grid: {run.id} started; follow it in {run.root / 'log.txt'}")
    start = time.time()
    with open(run.root / "log.txt", "a") as log:
        log.write(f"$ adwm quickstart {' '.join(run.overrides)}\n")
        log.flush()
        env = {**os.environ, PARENT_ENV: str(os.getpid())}  # the run dies with the grid
        # its W&B runs (one per stage, and its results) grouped under the grid, tagged by its labels
        own = [f"logger.group={spec.name}", "logger.tags=" + json.dumps(run.tags)]
        if spec.workers > 1:  # one share of the cores per run, and no worker processes of its own
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // spec.workers)))
            own += ["workers=1"]  # first: a grid axis that sets `workers` still wins
        proc = subprocess.run(
            [sys.executable, "-m", "adwm.cli", "quickstart", *own, *run.overrides], stdout=log, stderr=log, env=env
        )
    if proc.returncode != 0:
        raise RuntimeError(f"grid run {run.id} failed (exit {proc.returncode}); see {run.root / 'log.txt'}")
    record = {"id": run.id, "labels": run.labels, "wall_s": round(time.time() - start, 1)}
    _record(run).save(run.overrides, **record)
    reached("grid.run")
    return record


def _phases(runs: list[Run]) -> list[list[Run]]:
    """Waves in which no two runs write the same shared folder: the first run of each data key; the runs
    that only read what those made (same fit settings); the first run of each new fit key; the rest."""
    first_data, readers, first_fit, rest = [], [], [], []
    data_seen, fit_made = set(), set()
    for r in runs:
        if r.data_key not in data_seen:
            first_data.append(r)
            data_seen.add(r.data_key)
            fit_made.add(r.fit_key)
    for r in runs:
        if r in first_data:
            continue
        if r.fit_key in fit_made:
            readers.append(r)
        elif r.fit_key not in {f.fit_key for f in first_fit}:
            first_fit.append(r)
        else:
            rest.append(r)
    return [w for w in (first_data, readers, first_fit, rest) if w]


def select(runs: list[Run], only: list[str]) -> list[Run]:
    """The runs whose labels match every `axis=value` (or `seed=k`) of `only`."""
    want = {}
    for item in only:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"grid --only: expected axis=value, got '{item}'")
        want[key] = value
    labels = set(runs[0].labels) if runs else set()
    unknown = sorted(set(want) - labels)
    if unknown:
        raise ValueError(f"grid --only: unknown label {unknown}; the grid's labels are {sorted(labels)}")
    picked = [r for r in runs if all(str(r.labels[k]) == v for k, v in want.items())]
    if not picked:
        raise ValueError(f"grid --only: no run matches {only}")
    return picked


def run_grid(
    grid: str | Path | GridSpec, workers: int | None = None, only: list[str] | None = None, report_only: bool = False
) -> Path:
    """Run every missing run of the grid (a file or a spec; or the runs matching `only`), then aggregate;
    returns the table path. `report_only` aggregates the runs finished so far without starting any."""
    spec = grid if isinstance(grid, GridSpec) else load_spec(grid)
    runs = expand(spec)
    if report_only:
        return write_report(spec, runs, [_finished(r) for r in runs])
    chosen = select(runs, only) if only else runs
    todo = [r for r in chosen if not _finished(r)]
    picked = f" ({len(chosen)} selected by --only)" if only else ""
    print(
        f"grid {spec.name}: {len(runs)} runs{picked}, {len(chosen) - len(todo)} of them already finished",
        file=sys.stderr,
    )
    spec.workers = n_workers = workers or spec.workers
    done = len(runs) - len(todo)
    with bar(len(runs), f"grid {spec.name}", "run") as shown:
        shown.update(done)
        for wave in _phases(todo):
            with ThreadPoolExecutor(max_workers=n_workers) as pool:
                for record in pool.map(lambda r: _execute(r, spec), wave):
                    done += 1
                    shown.update(1)
                    say(f"grid [{done}/{len(runs)}] {record['id']} finished in {record['wall_s']} s")
    return write_report(spec, runs, [_finished(r) for r in runs])
