"""`adwm train-agent`: make an LLM agent offline by behaviour cloning on gold demonstrations.

A variant is either a tiny Llama trained from scratch with its own tokenizer, or
(`base` set) a pretrained checkpoint fine-tuned with a PEFT LoRA adapter, merged
into the saved weights so every later stage loads it like any checkpoint.
"""

from __future__ import annotations

import copy
import random
import time
import warnings
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from adwm.encoders.tokenizer import train_tokenizer
from adwm.envs.registry import EnvConfig, env_signature, make_env
from adwm.policies.bc import BehaviourCloningModule
from adwm.policies.bc_data import DemoDataset, gold_demos
from adwm.policies.config import PolicyConfig
from adwm.policies.loading import load_causal_lm
from adwm.policies.tiny import make_tiny_llama
from adwm.runtime.cache import StageRecord
from adwm.runtime.config import LoggerConfig, TrainerConfig
from adwm.runtime.trainer import build_logger, build_trainer, finish_logger
from adwm.stages.config import AgentConfig, AgentVariant


def variant_prompt(spec: AgentVariant, prompt: PolicyConfig) -> tuple[str, str]:
    """The prompt template and action suffix a variant trains with."""
    template = prompt.prompt_template if spec.prompt_template is None else spec.prompt_template
    return template, prompt.action_suffix if spec.action_suffix is None else spec.action_suffix


def training_signature(agent: AgentConfig, variant: str, env_cfg: EnvConfig, prompt: PolicyConfig, seed: int) -> dict:
    """Everything that decides what `train_agent` makes; a saved agent is reused only if it matches."""
    if variant not in agent.variants:
        raise ValueError(f"agent.name: unknown agent variant '{variant}'; choose from {sorted(agent.variants)}")
    spec = agent.variants[variant]
    defaults = AgentVariant()
    template, suffix = variant_prompt(spec, prompt)
    return {
        "variant": variant,
        # the data-size fields always; the others only where set, so existing agents keep their signatures
        **{k: v for k, v in asdict(spec).items() if k in ("episodes", "steps", "noise") or v != getattr(defaults, k)},
        "model": asdict(agent.model),
        "lr": agent.lr,
        "batch_size": agent.batch_size,
        "seed_offset": agent.seed_offset,
        "env": env_signature(env_cfg),
        "seed": seed,
        "prompt_template": template,
        "history_turns": prompt.history_turns,
        "action_suffix": suffix,
    }


def agent_record(path: Path) -> StageRecord:
    """A trained agent's stage record: its training settings (and facts) beside the saved weights."""
    return StageRecord(path / "adwm_agent.json", [path / "config.json"])


def is_trained(path: Path, signature: dict) -> bool:
    return agent_record(path).matches(signature)


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
    template, suffix = variant_prompt(spec, prompt)
    train, texts = gold_demos(env, seeds[n_val:], spec.noise, rng, template, prompt.history_turns)
    val, _ = gold_demos(env, seeds[:n_val], 0.0, rng, template, prompt.history_turns)
    env.close()

    if spec.base:
        model, tokenizer = lora_model(spec, f"agent.variants.{variant}")
    else:
        tokenizer = train_tokenizer(texts + [template], agent.model.vocab_size)
        model = make_tiny_llama(agent.model, tokenizer)
    train_ds = DemoDataset(train, tokenizer, suffix)
    val_ds = DemoDataset(val, tokenizer, suffix)
    gen = torch.Generator().manual_seed(seed)
    batch_size = spec.batch_size or agent.batch_size
    train_dl = DataLoader(train_ds, batch_size, shuffle=True, collate_fn=train_ds.collate, generator=gen)
    val_dl = DataLoader(val_ds, batch_size, collate_fn=val_ds.collate)

    lr = agent.lr if spec.lr is None else spec.lr
    module = BehaviourCloningModule(model, lr, agent.weight_decay, agent.warmup_steps, spec.steps)
    logger = build_logger(logger_cfg, out.parent, f"agent-{variant}", hparams, "train-agent")
    warnings.filterwarnings("ignore", message=".*validation_step.*val_dataloader.*")  # validated after fit
    trainer = build_trainer(trainer_cfg, logger, out.parent, max_steps=spec.steps, enable_checkpointing=False)
    trainer.fit(module, train_dl)
    val_metrics = trainer.validate(module, val_dl, verbose=False)[0]
    if logger:
        logger.log_metrics({f"final/{k}": float(v) for k, v in val_metrics.items()}, step=trainer.global_step)
    finish_logger(logger)

    out.mkdir(parents=True, exist_ok=True)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if spec.base:
        model = model.merge_and_unload()  # a plain checkpoint: later stages load it without PEFT
        model.hf_quantizer = None  # GGUF weights are de-quantized on load: what is saved is plain float weights
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    agent_record(out).save(
        signature,
        train_examples=len(train_ds),
        val_examples=len(val_ds),
        parameters=sum(p.numel() for p in model.parameters()),
        trained_parameters=trained,
        val_loss=val_metrics["val/loss"],
        val_token_acc=val_metrics["val/token_acc"],
        seconds=round(time.time() - start, 1),
    )
    return out


def lora_model(spec: AgentVariant, where: str) -> tuple[torch.nn.Module, Any]:
    """A trainable copy of the pretrained `spec.base` with a LoRA adapter (base weights frozen), and its tokenizer."""
    from peft import LoraConfig, get_peft_model

    base, tokenizer = load_causal_lm(spec.base, None, spec.gguf_file, where=f"{where}.base")
    lora = LoraConfig(r=spec.lora_rank, lora_alpha=2 * spec.lora_rank, lora_dropout=0.0, task_type="CAUSAL_LM")
    model = get_peft_model(copy.deepcopy(base).train(), lora)  # the cached base stays untouched for other agents
    return model, tokenizer
