"""`adwm train-agent`: make a small LLM agent offline (tokenizer + tiny Llama + behaviour cloning)."""

from __future__ import annotations

import json
import random
import time
import warnings
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from adwm.atomic import atomic_write_json
from adwm.envs.registry import EnvConfig, env_signature, make_env
from adwm.policies.bc import BehaviourCloningModule
from adwm.policies.bc_data import DemoDataset, gold_demos
from adwm.policies.llm import PolicyConfig
from adwm.policies.tiny import TinyModelConfig, make_tiny_llama, train_tokenizer
from adwm.trainer import LoggerConfig, TrainerConfig, build_logger, build_trainer


@dataclass
class AgentVariant:
    episodes: int = 200  # gold-demonstration episodes: more data, better agent
    steps: int = 400  # optimiser steps
    noise: float = 0.3  # share of random actions while demonstrating (recovery states)


@dataclass
class AgentConfig:
    name: str = "iter3"  # which variant `adwm train-agent` makes
    dir: str = "${run.root}/agents"  # each variant is saved to <dir>/<name>
    seed_offset: int = 1_000_000  # training tasks use seeds offset+[0, episodes): disjoint from logs and ground truth
    # `env` keys that differ while agents train, e.g. {scienceworld: {split: train}} when the logs and the
    # ground truth play the test variations: agents are then evaluated on variations they never trained on
    env: dict[str, Any] = field(default_factory=dict)
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    lr: float = 2e-3  # tiny models tolerate a high rate; cosine-decayed
    weight_decay: float = 0.01
    warmup_steps: int = 30
    batch_size: int = 32
    val_fraction: float = 0.1  # held-out demonstration episodes for val/loss
    variants: dict[str, AgentVariant] = field(
        default_factory=lambda: {
            "iter1": AgentVariant(episodes=60, steps=150),
            "iter2": AgentVariant(episodes=200, steps=300),
            "iter3": AgentVariant(episodes=600, steps=500),
        }
    )


def training_signature(agent: AgentConfig, variant: str, env_cfg: EnvConfig, prompt: PolicyConfig, seed: int) -> dict:
    """Everything that decides what `train_agent` makes; a saved agent is reused only if it matches."""
    if variant not in agent.variants:
        raise ValueError(f"agent.name: unknown agent variant '{variant}'; choose from {sorted(agent.variants)}")
    return {
        "variant": variant,
        **asdict(agent.variants[variant]),
        "model": asdict(agent.model),
        "lr": agent.lr,
        "batch_size": agent.batch_size,
        "seed_offset": agent.seed_offset,
        "env": env_signature(env_cfg),
        "seed": seed,
        "prompt_template": prompt.prompt_template,
        "history_turns": prompt.history_turns,
        "action_suffix": prompt.action_suffix,
    }


def is_trained(path: Path, signature: dict) -> bool:
    meta = path / "adwm_agent.json"
    return meta.is_file() and json.loads(meta.read_text()).get("signature") == signature


def train_agent(
    agent: AgentConfig,
    variant: str,
    env_cfg: EnvConfig,
    prompt: PolicyConfig,
    trainer_cfg: TrainerConfig,
    logger_cfg: LoggerConfig,
    seed: int,
    hparams: dict[str, Any],
) -> Path:
    """Train variant `variant` and save it with `save_pretrained`; returns its directory."""
    signature = training_signature(agent, variant, env_cfg, prompt, seed)  # validates the variant
    spec = agent.variants[variant]
    out = Path(agent.dir) / variant
    start = time.time()
    L.seed_everything(seed + zlib.crc32(variant.encode()) % 10_000, verbose=False)
    env = make_env(env_cfg)
    seeds = [agent.seed_offset + i for i in range(spec.episodes)]
    n_val = max(1, int(len(seeds) * agent.val_fraction))
    rng = random.Random(seed)
    train, texts = gold_demos(env, seeds[n_val:], spec.noise, rng, prompt.prompt_template, prompt.history_turns)
    val, _ = gold_demos(env, seeds[:n_val], 0.0, rng, prompt.prompt_template, prompt.history_turns)
    env.close()

    tokenizer = train_tokenizer(texts + [prompt.prompt_template], agent.model.vocab_size)
    model = make_tiny_llama(agent.model, tokenizer)
    train_ds = DemoDataset(train, tokenizer, prompt.action_suffix)
    val_ds = DemoDataset(val, tokenizer, prompt.action_suffix)
    gen = torch.Generator().manual_seed(seed)
    train_dl = DataLoader(train_ds, agent.batch_size, shuffle=True, collate_fn=train_ds.collate, generator=gen)
    val_dl = DataLoader(val_ds, agent.batch_size, collate_fn=val_ds.collate)

    module = BehaviourCloningModule(model, agent.lr, agent.weight_decay, agent.warmup_steps, spec.steps)
    logger = build_logger(logger_cfg, out.parent, f"agent-{variant}", hparams)
    warnings.filterwarnings("ignore", message=".*validation_step.*val_dataloader.*")  # validated after fit
    trainer = build_trainer(trainer_cfg, logger, out.parent, max_steps=spec.steps, enable_checkpointing=False)
    trainer.fit(module, train_dl)
    val_metrics = trainer.validate(module, val_dl, verbose=False)[0]

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "signature": signature,
        "train_examples": len(train_ds),
        "val_examples": len(val_ds),
        "parameters": sum(p.numel() for p in model.parameters()),
        "val_loss": val_metrics["val/loss"],
        "val_token_acc": val_metrics["val/token_acc"],
        "seconds": round(time.time() - start, 1),
    }
    atomic_write_json(out / "adwm_agent.json", meta)
    return out
