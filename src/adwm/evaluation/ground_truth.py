"""`adwm ground-truth`: on-policy values J of a policy family in the real environment.

Every policy plays the same environment seeds (common random numbers), so the
differences between policies carry less noise than each value alone. Each
policy's result is added to the result file atomically as soon as it is measured
(under a lock, so worker processes measuring other policies can share the file),
and a rerun skips the policies already measured with the same settings.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from adwm.data.play import EpisodeJob, run_episodes
from adwm.data.schema import Episode
from adwm.envs.registry import EnvConfig, env_signature, make_env
from adwm.evaluation.config import GroundTruthConfig
from adwm.evaluation.family import family_policies
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.loading import model_fingerprint
from adwm.runtime.atomic import read_json, update_json
from adwm.runtime.cache import entry_matches
from adwm.runtime.faults import reached
from adwm.runtime.parallel import run_jobs
from adwm.runtime.progress import bar, say


def _keep(store: dict[int, Episode], shown, ep: Episode) -> None:
    store[ep.index] = ep
    shown.update(1)


def true_values(path: str | Path, names: list[str]) -> list[float] | None:
    """J of each named policy from a ground-truth file, or None unless the file holds all of them (then no
    metric against the truth is computed)."""
    path = Path(path)
    if not path.is_file():
        return None
    measured = read_json(path)
    return [measured[n]["J"] for n in names] if all(n in measured for n in names) else None


def summarise(returns: list[float]) -> dict:
    r = np.asarray(returns, dtype=float)
    se = float(r.std(ddof=1) / np.sqrt(len(r))) if len(r) > 1 else float("nan")
    return {"J": float(r.mean()), "se": se, "n": len(r)}


def ground_truth(
    policies: list[PolicyConfig],
    cfg: GroundTruthConfig,
    env_cfg: EnvConfig,
    seed: int,
    progress: bool = True,
    numbering: tuple[int, int] | None = None,
) -> dict[str, dict]:
    """{policy name: {J, se, n, returns, mean_length, seconds}}; resumable per policy. `numbering`: (index,
    total) of the first policy in the whole family, for the progress lines of a worker's one-policy job."""
    out = Path(cfg.out)
    results: dict[str, dict] = read_json(out) if out.is_file() else {}
    for k, pcfg in enumerate(policies):
        settings = {
            "n_episodes": cfg.n_episodes,
            "seed_offset": cfg.seed_offset,
            "seed": seed,
            "env": env_signature(env_cfg),
            "policy": asdict(pcfg),
            "weights": model_fingerprint(pcfg.model),
        }
        if entry_matches(results.get(pcfg.name), settings):
            continue
        start = time.time()
        policy = build_policy(pcfg, f"family policy '{pcfg.name}'")
        episodes: dict[int, Episode] = {}
        jobs = [EpisodeJob(i, cfg.seed_offset + i, (seed, 7, i), pcfg.name) for i in range(cfg.n_episodes)]
        with bar(cfg.n_episodes, f"ground truth {pcfg.name}", "episode") as shown:
            run_episodes(
                lambda: make_env(env_cfg), {pcfg.name: policy}, jobs, partial(_keep, episodes, shown), cfg.n_envs
            )
        returns = [episodes[i].discounted_return(env_cfg.gamma) for i in range(cfg.n_episodes)]
        results[pcfg.name] = {
            **summarise(returns),
            "returns": returns,
            "mean_length": float(np.mean([len(episodes[i].steps) for i in range(cfg.n_episodes)])),
            "success_rate": float(np.mean([bool(episodes[i].info.get("won")) for i in range(cfg.n_episodes)])),
            "seconds": round(time.time() - start, 3),
            "settings": settings,
        }
        update_json(out, lambda stored, name=pcfg.name: stored.__setitem__(name, results[name]))
        reached("ground_truth.policy")
        if progress:
            r = results[pcfg.name]
            first, total = numbering or (0, len(policies))
            say(f"ground-truth [{first + k + 1}/{total}] {pcfg.name}: J={r['J']:.3f} ± {r['se']:.3f} ({r['seconds']}s)")
    return {p.name: results[p.name] for p in policies}


def measure_policy(cfg: DictConfig, name: str) -> None:
    """The ground truth of one family policy, as a worker job (the results share one file)."""
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    k = [p.name for p in family].index(name)
    gcfg, env_cfg = OmegaConf.to_object(cfg.ground_truth), OmegaConf.to_object(cfg.env)
    ground_truth([family[k]], gcfg, env_cfg, cfg.seed, numbering=(k, len(family)))


def ground_truth_in_workers(cfg: DictConfig, workers: int, also: list | None = None) -> dict[str, dict]:
    """`ground_truth` of the family with one job per policy in `workers` processes (adwm.runtime.parallel), after
    the jobs `also` (e.g. collecting the log, which needs the same agents)."""
    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    run_jobs([*(also or []), *((f"ground truth {p.name}", measure_policy, (cfg, p.name)) for p in family)], workers)
    gcfg, env_cfg = OmegaConf.to_object(cfg.ground_truth), OmegaConf.to_object(cfg.env)
    return ground_truth(family, gcfg, env_cfg, cfg.seed, progress=False)
