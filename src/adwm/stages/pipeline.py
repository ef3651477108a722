"""The main job: agents -> behaviour logs -> ground truth -> world model -> J_hat (projectors first with
`ablation.reader=projector`) -> baselines -> summary.

Each stage skips what an earlier run already finished (trained agents, logged
episodes, measured policies), so an interrupted quickstart resumes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from adwm.evaluation.family import family_policies
from adwm.evaluation.ground_truth import ground_truth_in_workers
from adwm.evaluation.plots import plot_scatter
from adwm.runtime.atomic import atomic_write_json, exclusive, read_json
from adwm.runtime.faults import reached
from adwm.runtime.parallel import resolve_workers, run_jobs
from adwm.runtime.provenance import CONFIG_FILE, command_line, commit
from adwm.runtime.tracking import log_results_run
from adwm.stages.collect import collect, seconds_spent
from adwm.stages.evaluate import evaluate_in_workers
from adwm.stages.fit import can_resume, fit, is_fitted
from adwm.stages.ope import run_baselines
from adwm.stages.train_agent import is_trained, train_agent, training_signature


def agent_env(cfg: DictConfig):
    """The environment agents train in: `env` with the `agent.env` keys replaced."""
    if not cfg.agent.env:
        return OmegaConf.to_object(cfg.env)
    try:
        return OmegaConf.to_object(OmegaConf.merge(cfg.env, cfg.agent.env))
    except Exception as err:  # an unknown key or a wrong type, named by OmegaConf
        raise ValueError(f"agent.env: {err}".splitlines()[0]) from err


def train_agents(cfg: DictConfig, names: list[str], workers: int = 1) -> dict[str, Path]:
    """Train each named variant unless a checkpoint made with the same settings exists (the largest
    first, in `workers` processes)."""
    agent, env_cfg, prompt = OmegaConf.to_object(cfg.agent), agent_env(cfg), OmegaConf.to_object(cfg.policy)
    paths = {name: Path(agent.dir) / name for name in names}
    todo = [n for n in names if not is_trained(paths[n], training_signature(agent, n, env_cfg, prompt, cfg.seed))]
    todo.sort(key=lambda n: -agent.variants[n].steps)
    run_jobs([(f"agent {n}", _train_agent, (_job_config(cfg, workers), n)) for n in todo], workers)
    return paths


def _train_agent(cfg: DictConfig, name: str) -> None:
    print(f"quickstart: training agent {name}", file=sys.stderr)
    agent, env_cfg, prompt = OmegaConf.to_object(cfg.agent), agent_env(cfg), OmegaConf.to_object(cfg.policy)
    hparams = OmegaConf.to_container(cfg)
    train_agent(
        agent,
        name,
        env_cfg,
        prompt,
        OmegaConf.to_object(cfg.trainer),
        OmegaConf.to_object(cfg.logger),
        cfg.seed,
        hparams,
    )


def _job_config(cfg: DictConfig, workers: int) -> DictConfig:
    """`cfg` for a job run beside others: no progress bars drawn over each other."""
    if workers <= 1:
        return cfg
    out = cfg.copy()
    out.trainer.enable_progress_bar = False
    return out


def _collect(cfg: DictConfig) -> Path:
    return collect(OmegaConf.to_object(cfg.collect), OmegaConf.to_object(cfg.env), cfg.seed)


def format_table(rows: list[dict]) -> str:
    """Plain-text table of true values (and estimates, when present)."""
    est_names = list(dict.fromkeys(k for r in rows for k in r["estimates"]))  # adwm first, then the baselines
    head = f"{'policy':<16} {'J_true':>8} {'SE':>7}" + "".join(f" {n:>10}" for n in est_names)
    lines = [head, "-" * len(head)]
    for r in rows:
        line = f"{r['name']:<16} {r['J_true']:>8.3f} {r['J_true_se']:>7.3f}"
        line += "".join(f" {r['estimates'][n]:>10.3f}" for n in est_names)
        lines.append(line)
    return "\n".join(lines)


def stage_config(cfg: DictConfig, command: str) -> DictConfig:
    """`cfg` as the stand-alone command would see it (its outputs under <run.root>/<command>)."""
    out = cfg.copy()
    out.command = command
    out.run.dir = str(Path(cfg.run.root) / command)
    return out


def ensure_fitted(cfg: DictConfig, who: str) -> None:
    """Fit the world model into `run.fit` unless a fit with the same settings is there; an interrupted one
    continues from its last epoch."""
    fit_cfg = stage_config(cfg, "fit")
    fit_cfg.run.dir = cfg.run.fit
    if is_fitted(fit_cfg):
        return
    fit_cfg.fit.resume = can_resume(fit_cfg)
    what = "resuming the interrupted fit of" if fit_cfg.fit.resume else "fitting"
    print(f"{who}: {what} the world model in '{cfg.run.fit}'", file=sys.stderr)
    fit(fit_cfg)


def stage_seconds(
    cfg: DictConfig, log: Path, truth: dict, estimates: dict, baselines: dict, fit_seconds: float
) -> dict[str, float | None]:
    """Seconds each stage's jobs took when they ran, read from its outputs (so a resumed or reused stage
    reports its real cost, not the instant it took to find it done; `fit_seconds` where the fit records
    none). Jobs that ran side by side in worker processes overlap: these add up to more than the wall time."""
    out: dict[str, float | None] = {}
    agents = [Path(cfg.agent.dir) / name / "adwm_agent.json" for name in cfg.agent.variants]
    if all(p.is_file() for p in agents):
        out["train_agents"] = sum(json.loads(p.read_text()).get("seconds", 0.0) for p in agents)
    out["collect"] = seconds_spent(log) or None  # None: a log written before collection recorded its time
    out["ground_truth"] = sum(r.get("seconds", 0.0) for r in truth.values())
    fit_metrics = Path(cfg.run.fit) / "metrics.json"
    out["fit"] = (
        json.loads(fit_metrics.read_text()).get("seconds", fit_seconds) if fit_metrics.is_file() else fit_seconds
    )
    family = estimates.get("family", list(estimates["estimates"]))  # the results files may hold other policies
    behaviour = [b.policy.name for b in OmegaConf.to_object(cfg.collect).behaviour]
    simulated = [estimates["estimates"][n] for n in family]
    simulated += [v for n, v in estimates.get("behaviour", {}).items() if n in behaviour]
    out["project_and_evaluate"] = sum(e.get("seconds", 0.0) for e in simulated)
    if cfg.ope.estimators:
        out["baselines"] = sum(baselines["estimates"][n].get("seconds", 0.0) for n in family)
    return {k: None if v is None else round(float(v), 2) for k, v in out.items()}


def quickstart(cfg: DictConfig, overrides: list[str] | None = None) -> Path:
    """Run the whole job; returns the path of `summary.json`. One job per run folder at a time: a second
    one fails at once, naming the folder. `overrides`: the command line's, recorded in the summary."""
    with exclusive(Path(cfg.run.dir) / "quickstart", "the run folder"):
        return _quickstart(cfg, list(overrides or []))


def _quickstart(cfg: DictConfig, overrides: list[str]) -> Path:
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    behaviour = {b.policy.name for b in OmegaConf.to_object(cfg.collect).behaviour}
    clash = sorted(behaviour & {p.name for p in family})
    if clash:
        raise ValueError(
            f"collect.behaviour: behaviour agents must differ from every evaluated policy; shared: {clash}"
        )
    workers = resolve_workers(cfg.workers)
    job_cfg = _job_config(cfg, workers)
    start = time.time()
    timings: dict[str, float] = {}  # wall-clock seconds of this command per phase

    t = time.time()
    train_agents(cfg, list(cfg.agent.variants), workers)
    timings["train_agents"] = round(time.time() - t, 1)
    reached("quickstart.stage")

    t = time.time()  # the log and the ground truth need only the agents: their jobs share the workers
    truth = ground_truth_in_workers(job_cfg, workers, also=[("collect", _collect, (job_cfg,))])
    log = Path(cfg.collect.out)
    timings["collect_and_ground_truth"] = round(time.time() - t, 1)
    reached("quickstart.stage")

    t = time.time()
    ensure_fitted(cfg, "quickstart")
    timings["fit"] = round(time.time() - t, 1)
    reached("quickstart.stage")

    t = time.time()  # the projectors, simulations and baselines need only the world model: they share the workers
    also = [("baselines", run_baselines, (job_cfg,))] if cfg.ope.estimators else []
    estimates = read_json(evaluate_in_workers(job_cfg, workers, also))
    baselines: dict = {"estimates": {}, "metrics": {}}
    if cfg.ope.estimators:
        baselines = read_json(run_baselines(cfg, progress=False))
    timings["estimates_and_baselines"] = round(time.time() - t, 1)
    reached("quickstart.stage")
    timings["total"] = round(time.time() - start, 1)

    calibrated = estimates.get("calibration", {}).get("method", "none") != "none"
    rows = []
    for name, r in truth.items():
        row = {
            "name": name,
            "J_true": r["J"],
            "J_true_se": r["se"],
            "success_rate": r["success_rate"],
            "estimates": {"adwm": estimates["estimates"][name]["J_hat"]},
            "ci": {"adwm": estimates["estimates"][name]["ci"]},
        }
        if calibrated:  # the uncalibrated simulated value beside it
            row["estimates"]["adwm_sim"] = estimates["estimates"][name]["J_hat_sim"]
            row["ci"]["adwm_sim"] = estimates["estimates"][name]["ci_sim"]
        ope = baselines["estimates"].get(name, {})
        for est, e in ope.get("estimators", {}).items():
            row["estimates"][est], row["ci"][est] = e["J_hat"], e["ci"]
            row.setdefault("flags", {})[est] = e["flag"]
        if "n_episodes" in ope:  # the overlap of the log with this policy: the IS weights' effective sample size
            row["n_episodes"] = ope["n_episodes"]
            row["ess"] = {k: ope["estimators"][k]["ess"] for k in ("is", "is_est") if k in ope["estimators"]}
        rows.append(row)
    summary = {
        "env": cfg.env.name,
        "experiment": cfg.experiment,
        "seed": cfg.seed,
        "gamma": cfg.env.gamma,
        "behaviour_log": str(log),
        "policies": rows,
        "metrics": {
            "adwm": estimates.get("metrics", {}),
            **({"adwm_sim": estimates.get("metrics_sim", {})} if calibrated else {}),
            **baselines.get("metrics", {}),
        },
        "calibration": estimates.get("calibration"),
        "timings_s": timings,  # wall clock of this command per phase (~0 for a phase it found done)
        "stage_seconds": stage_seconds(cfg, log, truth, estimates, baselines, timings["fit"]),  # cost when run
        # what made it: the resolved config (written beside this file when the command ends), the command
        # line and the commit
        "config": str(Path(cfg.run.dir) / CONFIG_FILE),
        "command": command_line("quickstart", overrides),
        "overrides": overrides,
        "commit": commit(),
    }
    out = Path(cfg.run.dir) / "summary.json"
    atomic_write_json(out, summary)
    points = [{"estimator": e, "J_true": r["J_true"], "J_hat": v} for r in rows for e, v in r["estimates"].items()]
    plot_scatter(points, out.with_name("j_vs_jhat.png"), f"J vs J_hat: {cfg.experiment}, seed {cfg.seed}")
    config = OmegaConf.to_container(cfg, resolve=True)
    log_results_run(config, summary, out.with_name("j_vs_jhat.png"), "quickstart", Path(cfg.run.root).name)
    print(format_table(rows))
    for est, m in summary["metrics"].items():
        if m:
            print(f"{est:>6}: " + "  ".join(f"{k}={v:.3f}" for k, v in m.items()))
    return out
