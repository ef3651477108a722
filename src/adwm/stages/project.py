"""`adwm project`: train (or reuse) the projector of one (world model, agent backbone) pair."""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict
from pathlib import Path

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from adwm.data.datamodule import TrajectoryDataModule
from adwm.models.config import ProjectorConfig
from adwm.models.projector import ProjectorModule
from adwm.models.world_model import WorldModelModule
from adwm.policies.llm import LLMPolicy
from adwm.policies.loading import model_fingerprint
from adwm.runtime.atomic import atomic_write_json, file_lock
from adwm.runtime.cache import StageRecord
from adwm.runtime.checkpoints import load_checkpoint
from adwm.runtime.faults import reached
from adwm.runtime.trainer import build_logger, build_trainer, finish_logger, stopped_by_time


def backbone_key(policy_model: str) -> str:
    """A folder name per agent backbone: readable tail of the model path plus a short hash of all of it."""
    tail = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(policy_model).name or "model")[-40:]
    return f"{tail}-{hashlib.sha1(policy_model.encode()).hexdigest()[:8]}"


def _batches(states: list[dict], batch_size: int, shuffle: bool, seed: int) -> DataLoader:
    def collate(rows: list[dict]) -> dict:
        return {
            "tasks": [r["task"] for r in rows],
            "observations": [r["observation"] for r in rows],
            "candidates": [r["candidates"] for r in rows],
            "logged": [r["logged"] for r in rows],
        }

    gen = torch.Generator().manual_seed(seed)
    return DataLoader(states, batch_size, shuffle=shuffle, generator=gen if shuffle else None, collate_fn=collate)


def cap_candidates(states: list[dict], cap: int, rng: np.random.Generator) -> list[dict]:
    """Each state's candidates cut to `cap` (0 = no cut): the logged action and a uniform sample of the
    others, in their logged order. The distillation then matches the agent's two readings on that subset."""
    out = []
    for s in states:
        n = len(s["candidates"])
        if not 0 < cap < n:
            out.append(s)
            continue
        others = np.delete(np.arange(n), s["logged"])
        keep = np.sort(np.append(rng.choice(others, cap - 1, replace=False), s["logged"]))
        out.append(
            {**s, "candidates": [s["candidates"][i] for i in keep], "logged": int(np.searchsorted(keep, s["logged"]))}
        )
    return out


def world_model_path(cfg: DictConfig) -> Path:
    path = Path(cfg.project.world_model)
    if not path.is_file():
        raise FileNotFoundError(f"project.world_model: no world model checkpoint at '{path}' (run `adwm fit` first)")
    return path


def project(cfg: DictConfig, policy_cfg=None) -> Path:
    """Train the projector for `policy` (default: cfg.policy) unless one with the same settings exists."""
    pcfg = policy_cfg if policy_cfg is not None else OmegaConf.to_object(cfg.policy)
    proj_cfg = OmegaConf.to_object(cfg.projector)
    wm_path = world_model_path(cfg)
    out_dir = Path(cfg.project.dir) / backbone_key(pcfg.model)
    ckpt = out_dir / "projector.ckpt"
    settings = {
        "world_model": str(wm_path),
        "world_model_mtime": wm_path.stat().st_mtime_ns,
        "agent": pcfg.model,
        "agent_weights": model_fingerprint(pcfg.model),
        "projector": asdict(proj_cfg),
        "seed": cfg.seed,
    }
    record = StageRecord(out_dir / "settings.json", [ckpt])
    # worker processes estimating policies of one backbone: the first trains, the others wait and reuse it
    with file_lock(out_dir.with_name(out_dir.name + ".lock")):
        if not record.matches(settings):
            _train(cfg, pcfg, proj_cfg, wm_path, out_dir)
            record.save(settings)
            reached("project.backbone")
    return ckpt  # or the cached one: same world model, agent backbone and settings


def _train(cfg: DictConfig, pcfg, proj_cfg: ProjectorConfig, wm_path: Path, out_dir: Path) -> None:
    """Distil the projector for `pcfg`'s backbone into out_dir/projector.ckpt, with its metrics.json."""
    ckpt = out_dir / "projector.ckpt"
    L.seed_everything(cfg.seed, verbose=False)
    wm = load_checkpoint(WorldModelModule, wm_path, "project.world_model")
    policy = LLMPolicy(pcfg, "policy")
    dm = TrajectoryDataModule(OmegaConf.to_object(cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    train, val = dm.agent_states("train"), dm.agent_states("val")
    if not train:
        raise ValueError(f"{dm.cfg.log}: no logged step with an admissible list that contains its action")
    rng = np.random.default_rng(cfg.seed)
    if proj_cfg.max_train_states and len(train) > proj_cfg.max_train_states:
        train = [train[i] for i in rng.permutation(len(train))[: proj_cfg.max_train_states]]
    val = [val[i] for i in rng.permutation(len(val))[:512]]  # held-out logs; a sample keeps validation short
    train, val = cap_candidates(train, proj_cfg.max_candidates, rng), cap_candidates(val, proj_cfg.max_candidates, rng)
    n, d = wm.encoder.cfg.n_latents, wm.encoder.cfg.d_latent
    module = ProjectorModule(asdict(proj_cfg), (n, d), pcfg.model).attach(wm, policy)
    logger = build_logger(
        OmegaConf.to_object(cfg.logger), out_dir, f"project-{out_dir.name}", OmegaConf.to_container(cfg), "project"
    )
    trainer = build_trainer(
        OmegaConf.to_object(cfg.trainer),
        logger,
        out_dir,
        max_epochs=proj_cfg.max_epochs,
        max_steps=proj_cfg.max_steps if proj_cfg.max_steps > 0 else -1,
        max_time={"minutes": proj_cfg.max_minutes},
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    start = time.time()
    val_loader = _batches(val, proj_cfg.batch_size, False, cfg.seed) if val else None
    before = trainer.validate(module, val_loader, verbose=False)[0] if val else {}
    trainer.fit(module, _batches(train, proj_cfg.batch_size, True, cfg.seed), val_loader)
    reached("project.train")  # trained, nothing saved yet
    timed_out = stopped_by_time(trainer, "projector", proj_cfg.max_minutes)
    after = trainer.validate(module, val_loader, verbose=False)[0] if val else {}
    trainer.save_checkpoint(ckpt)
    if logger:
        logger.log_metrics({f"final/{k}": float(v) for k, v in after.items()}, step=trainer.global_step)
    finish_logger(logger)
    atomic_write_json(
        out_dir / "metrics.json",
        {
            "agent": pcfg.model,
            "seconds": round(time.time() - start, 1),
            "steps": trainer.global_step,
            "stopped_by_max_minutes": timed_out,
            "train_states": len(train),
            "val_states": len(val),
            "before": {k: float(v) for k, v in before.items()},
            "after": {k: float(v) for k, v in after.items()},
        },
    )


def load_projector(path: str | Path, world_model: WorldModelModule, policy: LLMPolicy) -> ProjectorModule:
    """A trained projector attached to its world model and agent, ready to read latents."""
    return load_checkpoint(ProjectorModule, path, "projector").attach(world_model, policy).to(world_model.device).eval()
