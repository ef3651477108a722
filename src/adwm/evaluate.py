"""`adwm evaluate`: ADWM estimates J_hat for a policy family from a trained world model.

Per policy: the agent's projector (trained or reused per agent backbone by
`adwm project`), its continuation tail value, then batched simulated rollouts.
Results are written atomically after each policy; a rerun with the same
settings skips the policies already estimated.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from adwm.atomic import atomic_write_json
from adwm.data.datamodule import TrajectoryDataModule
from adwm.evaluation.family import family_policies
from adwm.evaluation.metrics import family_metrics
from adwm.evaluation.readers import NearestTextReader, SoftTokenReader
from adwm.evaluation.simulate import (
    SimulateConfig,
    bootstrap_ci,
    check_candidates,
    logged_reward_range,
    logged_starts,
    simulate,
)
from adwm.guidance.composed import check_guidance
from adwm.guidance.continuation import Continuation, TailConfig, fit_tail_value
from adwm.models.world_model import WorldModelModule
from adwm.policies.distribution import uses_model
from adwm.policies.llm import LLMPolicy, PolicyConfig
from adwm.policies.loading import model_fingerprint
from adwm.project import load_projector, project

to_object = OmegaConf.to_object  # not adwm.config.to_object: config.py imports from here


@dataclass
class AblationConfig:
    projector: bool = True  # false: the agent reads the text of the nearest logged observation
    joint_encoder: bool = True  # false: the encoder stays frozen during `adwm fit`


@dataclass
class EvaluateConfig:
    world_model: str = "${run.fit}/checkpoints/last.ckpt"
    out: str = "${run.dir}/estimates.json"
    ground_truth: str = "${ground_truth.out}"  # read when it exists: metrics against the true values
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    tail: TailConfig = field(default_factory=TailConfig)


def estimate_policy(
    cfg: DictConfig, wm: WorldModelModule, dm: TrajectoryDataModule, pcfg: PolicyConfig, cache: dict | None = None
) -> dict:
    ecfg, guidance, ablation = to_object(cfg.evaluate), to_object(cfg.guidance), to_object(cfg.ablation)
    start = time.time()
    reader, llm = None, None
    if uses_model(pcfg):
        llm = LLMPolicy(pcfg, f"family policy '{pcfg.name}'")
        if ablation.projector:
            reader = SoftTokenReader(load_projector(project(cfg, pcfg), wm, llm))
        else:
            reader = NearestTextReader(wm, llm)
    continuation = None
    if guidance.eta > 0:
        tail = fit_tail_value(wm, pcfg, llm, dm, ecfg.tail, cfg.seed, cache) if ecfg.tail.enabled else None
        continuation = Continuation(wm, reader, tail)
    horizon = ecfg.simulate.horizon or cfg.env.max_steps
    returns = simulate(
        wm,
        pcfg,
        reader,
        logged_starts(dm),
        ecfg.simulate,
        guidance,
        cfg.env.gamma,
        horizon,
        cfg.seed,
        continuation,
        reward_range=logged_reward_range(dm),
    )
    lo, hi = bootstrap_ci(returns, ecfg.simulate.ci_resamples, ecfg.simulate.ci_level, cfg.seed)
    return {
        "J_hat": float(returns.mean()),
        "ci": [lo, hi],
        "n": len(returns),
        "seconds": round(time.time() - start, 1),
    }


def evaluate(cfg: DictConfig, progress: bool = True) -> Path:
    """Estimate every policy of the family; returns the path of the estimates JSON."""
    ecfg = to_object(cfg.evaluate)
    wm_path = Path(ecfg.world_model)
    if not wm_path.is_file():
        raise FileNotFoundError(
            f"evaluate.world_model: no world model checkpoint at '{wm_path}' (run `adwm fit` first)"
        )
    check_guidance(to_object(cfg.guidance))  # before any model is loaded
    check_candidates(ecfg.simulate)
    family = family_policies(to_object(cfg.policy), to_object(cfg.family))
    out = Path(ecfg.out)
    results: dict = json.loads(out.read_text()) if out.is_file() else {}
    estimates = results.setdefault("estimates", {})
    wm = dm = None
    cache: dict = {}  # the agents' text scores of logged states, shared by an eps family
    for k, pcfg in enumerate(family):
        settings = {
            "world_model": str(wm_path),
            "world_model_mtime": wm_path.stat().st_mtime_ns,
            "policy": asdict(pcfg),
            "weights": model_fingerprint(pcfg.model),
            "guidance": OmegaConf.to_container(cfg.guidance),
            "ablation": OmegaConf.to_container(cfg.ablation),
            "evaluate": {"simulate": asdict(ecfg.simulate), "tail": asdict(ecfg.tail)},
            "projector": OmegaConf.to_container(cfg.projector),
            "seed": cfg.seed,
        }
        if estimates.get(pcfg.name, {}).get("settings") == settings:
            continue
        if wm is None:
            wm = WorldModelModule.load_from_checkpoint(wm_path, map_location="cpu").eval()
            dm = TrajectoryDataModule(to_object(cfg.data), cfg.seed)
            dm.setup()
        estimates[pcfg.name] = {**estimate_policy(cfg, wm, dm, pcfg, cache), "settings": settings}
        atomic_write_json(out, results)
        if progress:
            e = estimates[pcfg.name]
            print(
                f"evaluate [{k + 1}/{len(family)}] {pcfg.name}: J_hat={e['J_hat']:.3f} ({e['seconds']}s)",
                file=sys.stderr,
            )
    names = [p.name for p in family]
    results["estimates"] = {n: estimates[n] for n in names}
    truth_path = Path(ecfg.ground_truth)
    if truth_path.is_file():
        truth = json.loads(truth_path.read_text())
        if all(n in truth for n in names):
            results["metrics"] = family_metrics([truth[n]["J"] for n in names], [estimates[n]["J_hat"] for n in names])
    atomic_write_json(out, results)
    return out
