"""`adwm evaluate`: ADWM estimates J_hat for a policy family from a trained world model.

Per policy: the rollouts of the world of `evaluate.world` (simulation/registry.py; in the learned world
the agent's projector, trained or reused per agent backbone by `adwm project`, and its continuation tail
value).
Results are written atomically after each policy; a rerun with the same
settings skips the policies already estimated.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from adwm.data.datamodule import TrajectoryDataModule, read_log
from adwm.evaluation.bootstrap import mean_interval
from adwm.evaluation.family import family_policies
from adwm.evaluation.ground_truth import true_values
from adwm.evaluation.metrics import family_metrics
from adwm.models.world_model import WorldModelModule
from adwm.policies.config import PolicyConfig
from adwm.policies.llm import LLMPolicy
from adwm.policies.loading import model_fingerprint
from adwm.policies.sampling import uses_model
from adwm.runtime.atomic import read_json, update_json
from adwm.runtime.cache import as_json, entry_matches
from adwm.runtime.checkpoints import load_checkpoint
from adwm.runtime.devices import resolve_device
from adwm.runtime.faults import reached
from adwm.runtime.hub import check_model_source
from adwm.runtime.parallel import run_jobs
from adwm.runtime.progress import say
from adwm.simulation.calibration import fit_calibration, logged_values
from adwm.simulation.config import world_spec
from adwm.simulation.readers import SoftTokenReader
from adwm.simulation.registry import World, WorldInputs, make_world, world_class
from adwm.simulation.starts import attach_logged_worlds
from adwm.stages.config import EvaluateConfig
from adwm.stages.project import load_projector, project


def estimate_policy(world: World, pcfg: PolicyConfig) -> dict:
    """One policy's simulated value in `world`, with its bootstrap interval (unit: rollout)."""
    sim = world.sim
    start = time.time()
    returns = world.rollout(pcfg)
    lo, hi = mean_interval(returns, sim.ci_resamples, sim.ci_level, world.seed)
    return {
        "J_hat_sim": float(returns.mean()),  # simulated; evaluate() adds the calibration's J_hat
        "ci_sim": [lo, hi],
        "n": len(returns),
        "seconds": round(time.time() - start, 3),
    }


def _policy_settings(cfg: DictConfig, ecfg: EvaluateConfig, wm_path: Path, pcfg: PolicyConfig) -> dict:
    """What a policy's simulated estimate depends on: a rerun with the same settings reuses it."""
    return {
        **world_class(ecfg.world).settings(cfg),
        "world_model": str(wm_path),  # the log's path in a world that reads no world model
        "world_model_mtime": wm_path.stat().st_mtime_ns,
        "policy": asdict(pcfg),
        "weights": model_fingerprint(pcfg.model),
        "evaluate": {"simulate": asdict(ecfg.simulate)},
        "seed": cfg.seed,
    }


def behaviour_policies(cfg: DictConfig, logged: dict[str, dict], log: str) -> list[PolicyConfig]:
    """The behaviour agents of `collect.behaviour`, each checked to have episodes in the log."""
    out = []
    for k, entry in enumerate(OmegaConf.to_object(cfg.collect).behaviour):
        if entry.policy.name not in logged:
            raise ValueError(
                f"collect.behaviour[{k}].policy.name: no episodes of '{entry.policy.name}' in the log "
                f"'{log}' (data.log); evaluate.calibration needs the agents that wrote it "
                f"(logged policies: {sorted(logged)}), or evaluate.calibration=none"
            )
        if entry.policy.kind == "heuristic":
            raise ValueError(
                f"collect.behaviour[{k}].policy.kind: '{entry.policy.name}' is a heuristic player, which "
                "simulation does not run (it reads text and history, not latents); evaluate.calibration=none"
            )
        out.append(entry.policy)
    return out


def _policies(cfg: DictConfig, ecfg: EvaluateConfig) -> tuple[list, list, dict]:
    """The family, the behaviour agents to simulate for the calibration, and their logged values; every
    agent's model is checked to exist before anything is simulated."""
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    logged, behaviour = {}, []
    if ecfg.calibration != "none":
        data = OmegaConf.to_object(cfg.data)
        log = data.log
        logged = logged_values(read_log(data, cfg.env.name), cfg.env.gamma)
        behaviour = behaviour_policies(cfg, logged, log)
    for group, policies in (("family policy", family), ("behaviour agent", behaviour)):
        for p in policies:
            if uses_model(p):
                check_model_source(p.model, f"{group} '{p.name}': model")
    return family, behaviour, logged


def _world_model_path(ecfg: EvaluateConfig, log: str) -> Path:
    """The world model's checkpoint; for a world that reads none (the oracle, the log's controls), the log."""
    if not world_spec(ecfg.world).learned:
        if not Path(log).is_file():
            raise FileNotFoundError(f"data.log: no episode log at '{log}' (evaluate.world={ecfg.world} reads it)")
        return Path(log)
    wm_path = Path(ecfg.world_model)
    if not wm_path.is_file():
        raise FileNotFoundError(
            f"evaluate.world_model: no world model checkpoint at '{wm_path}' (run `adwm fit` first)"
        )
    return wm_path


# this process's world (with its world model, data and the agents' score cache), reused by the next policy
# a worker simulates: built once a process, not once a policy
_LOADED: dict = {}


def _projector_reader(cfg: DictConfig) -> Callable[[PolicyConfig, LLMPolicy], SoftTokenReader]:
    """The learned world's projector for an agent: trained or reused per backbone by `adwm project`."""
    return lambda pcfg, llm: SoftTokenReader(load_projector(project(cfg, pcfg), _LOADED["wm"], llm))


def loaded_world(cfg: DictConfig, wm_path: Path) -> World:
    """The world of `evaluate.world` for this config, built once a process (`_LOADED`)."""
    ecfg = cfg.evaluate
    settings = world_class(ecfg.world).settings(cfg)
    data = OmegaConf.to_container(cfg.data)
    key = json.dumps([str(wm_path), wm_path.stat().st_mtime_ns, data, cfg.seed, as_json(settings)], sort_keys=True)
    if _LOADED.get("key") != key:
        dm = TrajectoryDataModule(OmegaConf.to_object(cfg.data), cfg.seed, cfg.env.name)
        dm.setup()
        wm = None  # a world that reads no world model needs none
        if world_spec(ecfg.world).learned:
            device = resolve_device(ecfg.device, "evaluate.device")
            wm = load_checkpoint(WorldModelModule, wm_path, "evaluate.world_model").eval().to(device)
            attach_logged_worlds(wm, dm)
        _LOADED.clear()
        _LOADED.update(key=key, wm=wm, dm=dm)
        inputs = WorldInputs(cfg, dm, wm, cache={}, projector=_projector_reader(cfg))  # cache: text scores
        _LOADED["world"] = make_world(inputs)
    return _LOADED["world"]


def behaviour_store(ecfg: EvaluateConfig) -> Path:
    """Where the behaviour agents' simulations are kept: beside the world model (`evaluate.behaviour_out`),
    since they depend on the world model, the log and the simulation's settings, not on the family, so
    every later evaluation with that world model reuses them (each world under its own settings); in the
    oracle and the log's controls, the results file."""
    return Path(ecfg.behaviour_out if world_spec(ecfg.world).learned else ecfg.out)


def _settings_key(settings: dict) -> str:
    return hashlib.sha1(json.dumps(as_json(settings), sort_keys=True).encode()).hexdigest()[:16]


def _slot(ecfg: EvaluateConfig, group: str, name: str, settings: dict) -> tuple[Path, str, str]:
    """Where a policy's simulation is kept -> (file, key, subkey): a family policy's in the results file
    under group -> name, a behaviour agent's in the behaviour store under name -> settings key."""
    out, store = Path(ecfg.out), behaviour_store(ecfg)
    if group == "estimates" or store == out:
        return out, group, name
    return store, name, _settings_key(settings)


def _stored(cfg: DictConfig, ecfg: EvaluateConfig, wm_path: Path, group: str, pcfg: PolicyConfig) -> dict | None:
    """This policy's finished simulation with the current settings, or None."""
    settings = _policy_settings(cfg, ecfg, wm_path, pcfg)
    path, key, sub = _slot(ecfg, group, pcfg.name, settings)
    entry = (read_json(path) if path.is_file() else {}).get(key, {}).get(sub)
    return entry if entry_matches(entry, settings) else None


def _simulate(cfg: DictConfig, ecfg: EvaluateConfig, wm_path: Path, group: str, pcfg: PolicyConfig, tag: str) -> None:
    """Estimate one policy and add it to the results file, a behaviour agent's to the behaviour store (under
    the file's lock: workers share it)."""
    e = estimate_policy(loaded_world(cfg, wm_path), pcfg)
    settings = _policy_settings(cfg, ecfg, wm_path, pcfg)
    entry = {**e, "settings": settings}
    path, key, sub = _slot(ecfg, group, pcfg.name, settings)
    update_json(path, lambda stored: stored.setdefault(key, {}).__setitem__(sub, entry))
    reached("evaluate.policy")
    say(f"evaluate [{tag}] {pcfg.name}: J_hat_sim={e['J_hat_sim']:.3f} ({e['seconds']}s)")


def pending_simulations(cfg: DictConfig) -> list[tuple[str, str]]:
    """(group, policy name) of each simulation `evaluate(cfg)` needs and no earlier run finished with the
    same settings: group "estimates" for the family, "behaviour" for the calibration's agents. The first
    of each agent backbone comes first: run as worker jobs, each backbone's projector is then trained by
    the worker that reaches it while the others simulate, not waited for. Policies that never read their
    agent come last."""
    ecfg = OmegaConf.to_object(cfg.evaluate)
    wm_path = _world_model_path(ecfg, cfg.data.log)
    family, behaviour, _ = _policies(cfg, ecfg)
    pending = [
        (group, p)
        for group, ps in (("estimates", family), ("behaviour", behaviour))
        for p in ps
        if _stored(cfg, ecfg, wm_path, group, p) is None
    ]
    first = {}
    for job in pending:
        first.setdefault(job[1].model, job)
    rest = [job for job in pending if job not in first.values()]
    # the cheapest last, so that no worker starts a long job while the other idles at the end: a policy
    # that never reads its agent (eps = 1) simulates in a third of the time
    rest.sort(key=lambda job: not uses_model(job[1]))
    return [(group, p.name) for group, p in [*first.values(), *rest]]


def evaluate_in_workers(cfg: DictConfig, workers: int, also: list | None = None) -> Path:
    """`evaluate(cfg)` with its pending simulations as jobs of `workers` processes (adwm.runtime.parallel), after
    the jobs `also` (e.g. the baselines, which need the same world model)."""
    _world_model_path(OmegaConf.to_object(cfg.evaluate), cfg.data.log)  # a named error before any worker starts
    jobs = list(also or [])
    jobs += [(f"estimate {name}", simulate_policy, (cfg, group, name)) for group, name in pending_simulations(cfg)]
    run_jobs(jobs, workers)
    return evaluate(cfg)


def simulate_policy(cfg: DictConfig, group: str, name: str) -> None:
    """One simulation of `pending_simulations(cfg)`, as a worker job: `evaluate(cfg)` then finds it done."""
    ecfg = OmegaConf.to_object(cfg.evaluate)
    if group == "estimates":
        policies = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    else:  # checked against the log by `pending_simulations`; reading the log again per job is not needed
        policies = [b.policy for b in OmegaConf.to_object(cfg.collect).behaviour]
    pcfg = next(p for p in policies if p.name == name)
    _simulate(cfg, ecfg, _world_model_path(ecfg, cfg.data.log), group, pcfg, f"{group} {name}")


def evaluate(cfg: DictConfig) -> Path:
    """Estimate every policy of the family (and, to calibrate, the behaviour agents); returns the path of the
    estimates JSON. Simulations finished earlier with the same settings (by a previous run or by worker
    processes running `simulate_policy`) are reused."""
    ecfg = OmegaConf.to_object(cfg.evaluate)
    wm_path = _world_model_path(ecfg, cfg.data.log)
    family, behaviour, logged = _policies(cfg, ecfg)
    out = Path(ecfg.out)
    jobs = [("estimates", p, f"{k + 1}/{len(family)}") for k, p in enumerate(family)]
    jobs += [("behaviour", p, f"behaviour {k + 1}/{len(behaviour)}") for k, p in enumerate(behaviour)]
    for group, pcfg, tag in jobs:
        if _stored(cfg, ecfg, wm_path, group, pcfg) is None:
            _simulate(cfg, ecfg, wm_path, group, pcfg, tag)
    simulated = {p.name: _stored(cfg, ecfg, wm_path, "behaviour", p) for p in behaviour}
    update_json(out, lambda results: _finalize(results, cfg, ecfg, family, simulated, behaviour, logged))
    return out


def _finalize(
    results: dict,
    cfg: DictConfig,
    ecfg: EvaluateConfig,
    family: list,
    simulated: dict,
    behaviour: list,
    logged: dict,
) -> None:
    """Calibration and metrics of this run's family, written into the results file under its lock; the
    behaviour agents' simulations (`simulated`, read from the behaviour store) are copied in beside them."""
    if behaviour:
        results.setdefault("behaviour", {}).update(simulated)
    for store in (results["estimates"], results.get("behaviour", {})):
        for done in store.values():
            if "J_hat_sim" not in done:  # written before calibration existed: J_hat was the simulated value
                done["J_hat_sim"], done["ci_sim"] = done["J_hat"], done["ci"]
    # results only grow: entries of policies another run estimated into this file stay; `family` names this
    # run's policies, the ones its calibration and metrics are about
    names = results["family"] = [p.name for p in family]
    estimates = results["estimates"]
    for p in behaviour:
        results["behaviour"][p.name]["logged"] = logged[p.name]
    level = ecfg.simulate.ci_level
    calibration = fit_calibration(ecfg.calibration, behaviour, results.get("behaviour", {}), logged, level)
    results["calibration"] = calibration.to_dict()
    if behaviour:
        gaps = ", ".join(f"{n} {g['gap']:+.3f}" for n, g in results["calibration"]["gaps"].items())
        print(f"evaluate: calibration={ecfg.calibration}, logged - simulated value: {gaps}", file=sys.stderr)
    for pcfg in family:
        e = estimates[pcfg.name]
        e["calibration_offset"] = calibration.offset(pcfg)
        e["J_hat"] = e["J_hat_sim"] + e["calibration_offset"]
        e["ci"] = calibration.interval(pcfg, e["ci_sim"], level)
    results.pop("metrics", None)
    results.pop("metrics_sim", None)
    j = true_values(ecfg.ground_truth, names)
    if j is not None:
        results["metrics"] = family_metrics(j, [estimates[n]["J_hat"] for n in names])
        results["metrics_sim"] = family_metrics(j, [estimates[n]["J_hat_sim"] for n in names])
