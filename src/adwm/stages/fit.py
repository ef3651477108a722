"""`adwm fit`: train the world model on episode logs, with checkpoints and resume."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from adwm.data.datamodule import TrajectoryDataModule
from adwm.envs.registry import state_key
from adwm.models.text_decoder import build_vocabulary
from adwm.models.world_model import PROPOSALS, WorldModelModule
from adwm.models.world_model.decoder_fit import fit_text_decoder
from adwm.models.world_model.diagnostics import set_metrics
from adwm.models.world_model.replay import refit_transition_heads
from adwm.runtime.atomic import atomic_write_json, exclusive
from adwm.runtime.cache import StageRecord, as_json
from adwm.runtime.checkpoints import load_checkpoint
from adwm.runtime.trainer import build_logger, build_trainer, finish_logger, stopped_by_time
from adwm.simulation.fidelity import replay_fidelity
from adwm.stages.config import FitConfig
from adwm.stages.fit_callbacks import EpochStartCheckpoint, FaultPoint, FreezeEncoder


def fit_settings(cfg: DictConfig) -> dict:
    """What a world model depends on: data, encoder, world model, training budget, ablation, seed."""
    reports = ("resume", "fidelity_episodes")  # how it runs and what it reports, not what it makes
    budget = {k: v for k, v in OmegaConf.to_container(cfg.fit, resolve=True).items() if k not in reports}
    log = Path(cfg.data.log)
    return {
        "log": str(log),
        "log_size": log.stat().st_size if log.is_file() else None,
        "data": OmegaConf.to_container(cfg.data, resolve=True),
        "encoder": OmegaConf.to_container(cfg.encoder, resolve=True),
        "world_model": OmegaConf.to_container(cfg.world_model, resolve=True),
        "fit": budget,
        "joint_encoder": cfg.ablation.joint_encoder,
        "seed": cfg.seed,
    }


# settings a resumed fit may change: how long it trains and what it reports; everything else must match.
# Not `fit.rollout_heads`: a finished checkpoint holds heads already refitted, and refitting them again
# under other settings would not give the world model a fresh fit with those settings gives.
RESUMABLE_CHANGES = (
    "fit.max_steps",
    "fit.max_epochs",
    "fit.max_minutes",
    "fit.val_every_n_epochs",
    "fit.val_batches",
    "fit.rollout_eval",
    "fit.rollout_every_n_epochs",
    "fit.rollout_n",
)
_KEYS = {"log": "data.log", "log_size": "data.log (its size)", "joint_encoder": "ablation.joint_encoder"}


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def resume_mismatch(started: dict | None, settings: dict) -> list[str]:
    """Dotted keys whose value differs between a checkpoint's settings and `settings` (those a resumed fit
    may change excepted); ["(no record)"] when the checkpoint has no settings record."""
    if started is None:
        return ["(no record of the settings the checkpoint was made with)"]
    old, new = _flat(started.get("settings", {})), _flat(as_json(settings))
    changed = []
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) != new.get(key) and not key.startswith(RESUMABLE_CHANGES):
            name = _KEYS.get(key, key)
            changed.append(f"{name} ({old.get(key)!r} -> {new.get(key)!r})")
    return changed


def started_record(run_dir: str | Path) -> StageRecord:
    """The settings a fit's checkpoints are made from, written when the fit starts."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    return StageRecord(ckpt_dir / "settings.json", [ckpt_dir / "last.ckpt"])


def can_resume(cfg: DictConfig) -> bool:
    """An interrupted fit with the same settings left a checkpoint in run.dir (quickstart resumes it)."""
    record = started_record(cfg.run.dir)
    return all(p.exists() for p in record.outputs) and not resume_mismatch(record.load(), fit_settings(cfg))


def fit_record(run_dir: str | Path) -> StageRecord:
    """The fit's stage record: its settings beside the last checkpoint."""
    return StageRecord(Path(run_dir) / "fit_settings.json", [Path(run_dir) / "checkpoints" / "last.ckpt"])


def is_fitted(cfg: DictConfig) -> bool:
    """A finished fit with the same settings exists in run.dir."""
    return fit_record(cfg.run.dir).matches(fit_settings(cfg))


def fit(cfg: DictConfig) -> Path:
    """Train; returns the path of the last checkpoint. Metrics land in <run.dir>/metrics.json. One fit per
    folder at a time: a second one fails at once, naming the folder."""
    with exclusive(Path(cfg.run.dir) / "fit", "the world model folder"):
        return _fit(cfg)


def _fit(cfg: DictConfig) -> Path:
    """Train the world model (resuming where asked), finish it on the trained weights (the bank of logged
    states, the proposal calibration, the heads' refit, fidelity, the fit-end estimate), save it."""
    fcfg = OmegaConf.to_object(cfg.fit)
    run_dir = Path(cfg.run.dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    L.seed_everything(cfg.seed, verbose=False)  # weights, CFG dropout, noise draws: reproducible from the seed
    dm = TrajectoryDataModule(OmegaConf.to_object(cfg.data), cfg.seed, cfg.env.name)
    dm.setup()
    settings = fit_settings(cfg)
    module, ckpt_path = _module_to_train(cfg, dm, fcfg, last, settings)
    evaluator = rollout_evaluator(cfg, dm, fcfg, run_dir) if fcfg.rollout_eval else None
    trainer, logger, freezer = _trainer(cfg, fcfg, module, dm, last, evaluator)
    start = time.time()
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    timed_out = stopped_by_time(trainer, "fit", fcfg.max_minutes)
    if trainer.global_step == 0:  # never record an untrained model as fitted
        raise RuntimeError(
            f"fit: no optimiser step was taken (fit.max_minutes={fcfg.max_minutes} ended the fit before its "
            "first step); nothing was recorded as fitted"
        )
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # the held-out metrics of the fitted model (its last step)
    metrics.update({k: float(v) for k, v in trainer.validate(module, datamodule=dm, verbose=False)[0].items()})
    metrics.update(_finish(cfg, fcfg, module, dm))
    if evaluator is not None:  # the fit-end estimate, on the finished world model (refitted heads, bank)
        evaluator.run(trainer, module, "final")
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("rollout/")})
    trainer.save_checkpoint(last)
    fit_record(run_dir).save(settings)
    atomic_write_json(
        run_dir / "metrics.json",
        {
            "global_step": trainer.global_step,
            # where the encoder stopped training in this run (None: it never trained or never froze here)
            "encoder_frozen_at_step": None if freezer is None else freezer.frozen_at,
            "stopped_by_max_minutes": timed_out,
            "epoch": trainer.current_epoch,
            "seconds": round(time.time() - start, 1),
            "train_steps": len(dm.train_items),
            "val_steps": len(dm.val_items),
            "actions": len(dm.actions),
            "metrics": metrics,
        },
    )
    if logger:
        logger.log_metrics({f"final/{k}": v for k, v in metrics.items()}, step=trainer.global_step)
    finish_logger(logger)
    return last


def _module_to_train(
    cfg: DictConfig, dm: TrajectoryDataModule, fcfg: FitConfig, last: Path, settings: dict
) -> tuple[WorldModelModule, str | None]:
    """The world model to train and the checkpoint to resume from: `last` where `fit.resume` finds it made
    from the same settings, else a new model (an earlier fit's checkpoints and records removed)."""
    run_dir = last.parent.parent
    if fcfg.resume and last.is_file():
        changed = resume_mismatch(started_record(run_dir).load(), settings)
        if changed:
            raise ValueError(
                f"fit.resume: the checkpoint '{last}' was made from other settings or data: {'; '.join(changed)}; "
                "restore them, or set fit.resume=false to fit anew"
            )
        return load_checkpoint(WorldModelModule, last, "fit.resume"), str(last)
    # a fresh fit replaces an earlier one in run.dir: its checkpoints (Lightning would save the new last as
    # last-v1.ckpt, and a later fit.resume=true would continue the old fit) and its settings
    for stale in last.parent.glob("*.ckpt"):
        stale.unlink(missing_ok=True)
    fit_record(run_dir).clear()
    started_record(run_dir).save(settings)
    encoder = OmegaConf.to_object(cfg.encoder)
    encoder.trainable = encoder.trainable and cfg.ablation.joint_encoder  # the frozen-encoder ablation
    world_model = OmegaConf.to_object(cfg.world_model)
    # the decoder writes the pieces of the training split's observations (held-out ones may hold others)
    train_texts = [s.observation for ep in dm.train_episodes for s in ep.steps]
    train_texts += [ep.final_observation for ep in dm.train_episodes]
    vocab = build_vocabulary(train_texts, world_model.decoder.max_vocab) if world_model.decoder.enabled else None
    module = WorldModelModule(
        asdict(encoder), asdict(world_model), dm.cfg.history, dm.actions, texts=dm.observations, decoder_vocab=vocab
    )
    return module, None


def _trainer(cfg: DictConfig, fcfg: FitConfig, module, dm, last: Path, evaluator):
    """The Lightning trainer of the fit with its callbacks and logger -> (trainer, logger, the encoder's
    freezer or None)."""
    run_dir = last.parent.parent
    val_every = fcfg.val_every_n_epochs or (fcfg.rollout_every_n_epochs if fcfg.rollout_eval else 0)
    freezer = None
    callbacks = [EpochStartCheckpoint(last), FaultPoint()] + ([evaluator] if evaluator is not None else [])
    if not module.encoder.cfg.trainable:
        module.freeze_encoder(dm.texts())  # a frozen encoder's latents are fixed: encode each text once
    elif fcfg.encoder_share < 1 or fcfg.encoder_steps > 0:
        freezer = FreezeEncoder(fcfg.encoder_share, fcfg.max_minutes, fcfg.encoder_steps)
        callbacks.append(freezer)
    logger = build_logger(OmegaConf.to_object(cfg.logger), run_dir, "fit", OmegaConf.to_container(cfg), "fit")
    trainer = build_trainer(
        OmegaConf.to_object(cfg.trainer),
        logger,
        run_dir,
        enable_checkpointing=False,  # EpochStartCheckpoint writes last.ckpt; Lightning's own would add files
        max_epochs=fcfg.max_epochs,
        max_steps=fcfg.max_steps if fcfg.max_steps > 0 else -1,
        max_time={"minutes": fcfg.max_minutes},
        callbacks=callbacks,
        check_val_every_n_epoch=val_every or fcfg.max_epochs + 1,  # never during the fit: after it, below
        limit_val_batches=fcfg.val_batches or 1.0,
        num_sanity_val_steps=0,
    )
    return trainer, logger, freezer


def _finish(cfg: DictConfig, fcfg: FitConfig, module: WorldModelModule, dm: TrajectoryDataModule) -> dict:
    """What the trained weights still need, in order: the bank of logged states and the proposal heads'
    calibration, the reward and termination heads refitted on replays, the held-out fidelity -> metrics."""
    metrics: dict[str, float] = {}
    texts, admissible = dm.admissible_states("train")
    if dm.free_form:  # agents wrote their actions: a bank of the logged states (snapping, text reading), no lists
        module.eval()
        states = dm.logged_states("train")
        module.build_proposal_bank(states, [[] for _ in states], dm.arrivals(states))
    elif texts:  # environments without admissible lists have no bank: the head alone proposes
        module.eval()
        module.build_proposal_bank(texts, admissible, dm.arrivals(texts))
        calib = np.random.default_rng(cfg.seed).permutation(len(texts))[:4000]  # a sample keeps this seconds
        module.calibrate_proposal([texts[i] for i in calib], [admissible[i] for i in calib])
        loader = dm.train_dataloader()
        module.calibrate_next_proposal(batch for _, batch in zip(range(32), loader))
        metrics.update(proposal_metrics(module, dm))
    if fcfg.rollout_heads.enabled:
        module.eval()
        metrics.update(refit_transition_heads(module, dm, fcfg.rollout_heads, cfg.env.gamma, cfg.seed))
    if module.text_decoder is not None:
        module.eval()
        metrics.update(fit_text_decoder(module, dm, fcfg.decoder, cfg.seed))
    if fcfg.fidelity_episodes > 0 and module.proposal_bank is not None and dm.val_episodes:
        module.eval()
        held = dm.val_episodes[: fcfg.fidelity_episodes]
        key = state_key(cfg.env.name)
        by_action = fcfg.rollout_heads.snap_by_action
        metrics.update(
            replay_fidelity(module, held, dm.train_episodes, key, cfg.env.gamma, cfg.seed, by_action=by_action)
        )
    return metrics


@torch.no_grad()
def proposal_metrics(module: WorldModelModule, dm: TrajectoryDataModule) -> dict[str, float]:
    """Candidate sets of every proposal mode against the logged admissible lists of held-out states."""
    texts, admissible = dm.admissible_states("val")
    if not texts:
        return {}
    true = torch.zeros(len(texts), len(module.actions), dtype=torch.bool)
    for i, ids in enumerate(admissible):
        true[i, ids] = True
    z = module.encode(texts)
    out = {}
    for mode in PROPOSALS:
        for k, v in set_metrics(module.propose(z, mode), true).items():
            out[f"proposal/{mode}_{k}"] = float(v)
    return out


def rollout_evaluator(cfg: DictConfig, dm: TrajectoryDataModule, fcfg: FitConfig, run_dir: Path):
    """The RolloutEvaluator of `fit.rollout_eval` for the configured family (true values when measured)."""
    from adwm.evaluation.family import family_policies
    from adwm.evaluation.ground_truth import true_values
    from adwm.simulation.callback import RolloutEvaluator

    family = family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family))
    j = true_values(cfg.ground_truth.out, [p.name for p in family])
    truth = None if j is None else {p.name: v for p, v in zip(family, j)}
    sim = dataclasses.replace(OmegaConf.to_object(cfg.evaluate.simulate), n_rollouts=fcfg.rollout_n)
    horizon = sim.horizon or cfg.env.max_steps
    return RolloutEvaluator(
        family,
        dm,
        run_dir,
        sim,
        cfg.env.gamma,
        horizon,
        fcfg.rollout_every_n_epochs,
        truth,
        seed=cfg.seed,
        at_fit_end=False,  # `fit` runs the final estimate after the heads' refit
        world=OmegaConf.to_object(cfg.evaluate.diffusion),
    )
