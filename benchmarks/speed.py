"""Speed of the pieces the main job leans on; writes benchmarks/results/speed.json.

    .venv/bin/python benchmarks/speed.py

* builtin env: microseconds per step under a uniform agent, milliseconds per reset (incl. the solver);
* agent scoring: milliseconds per state for a batch of 64 states, default tiny-agent size (random init);
* behaviour cloning: supervised examples per second of one optimiser step, batch 32;
* text decoder (world_model.decoder, default size, a builtin-sized vocabulary of 150 pieces and texts of 70):
  seconds per training step at fit.decoder.batch_size, milliseconds to decode a batch of 64 states.
"""

from __future__ import annotations

import json
import platform
import random
import tempfile
import time
from pathlib import Path

import torch

from adwm.encoders.tokenizer import train_tokenizer
from adwm.envs import BuiltinEnv
from adwm.policies.base import AgentState
from adwm.policies.bc import BehaviourCloningModule
from adwm.policies.bc_data import DemoDataset, gold_demos
from adwm.policies.config import PolicyConfig, TinyModelConfig
from adwm.policies.llm import LLMPolicy
from adwm.policies.tiny import make_tiny_llama
from adwm.runtime.atomic import atomic_write_json
from adwm.runtime.provenance import benchmark_stamp


def env_speed() -> dict:
    env, rng = BuiltinEnv(), random.Random(0)
    t, resets = time.perf_counter(), 300
    for seed in range(resets):
        env.reset(seed)
    reset_ms = (time.perf_counter() - t) / resets * 1e3
    steps, t = 0, time.perf_counter()
    for seed in range(resets):
        adm = env.reset(seed).admissible
        while True:
            s = env.step(rng.choice(adm))
            steps += 1
            if s.done:
                break
            adm = s.admissible
    total = time.perf_counter() - t
    return {"reset_ms": round(reset_ms, 3), "step_us": round((total - resets * reset_ms / 1e3) / steps * 1e6, 1)}


def agent_speed(tmp: Path) -> dict:
    env = BuiltinEnv()
    demos, texts = gold_demos(env, list(range(60)), 0.3, random.Random(0), PolicyConfig().prompt_template, 0)
    tok = train_tokenizer(texts, 1024)
    torch.manual_seed(0)
    model = make_tiny_llama(TinyModelConfig(hidden_size=128, intermediate_size=384, num_layers=3), tok)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    policy = LLMPolicy(PolicyConfig(name="bench", model=str(tmp), history_turns=0))
    states = []
    for seed in range(64):
        r = env.reset(seed)
        states.append(AgentState(r.task, r.observation, [], r.admissible))
    policy.log_distributions(states)  # warm-up
    t = time.perf_counter()
    for _ in range(5):
        policy.log_distributions(states)
    score_ms = (time.perf_counter() - t) / (5 * len(states)) * 1e3

    ds = DemoDataset(demos[:32], tok, "\n")
    batch = ds.collate([ds[i] for i in range(32)])
    module = BehaviourCloningModule(model.train(), 1e-3, 0.0, 1, 10)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    for _ in range(2):
        module.model_step(batch)[0].backward()
        opt.step()
        opt.zero_grad()
    t = time.perf_counter()
    for _ in range(5):
        module.model_step(batch)[0].backward()
        opt.step()
        opt.zero_grad()
    bc_per_s = 5 * 32 / (time.perf_counter() - t)
    return {
        "agent_parameters": sum(p.numel() for p in model.parameters()),
        "score_ms_per_state_batch64": round(score_ms, 2),
        "mean_admissible": round(sum(len(s.admissible) for s in states) / len(states), 1),
        "mean_prompt_tokens": round(sum(len(policy.prompt_ids(s)) for s in states) / len(states), 1),
        "bc_examples_per_s": round(bc_per_s, 1),
    }


def decoder_speed() -> dict:
    from adwm.models.text_decoder import TextDecoder
    from adwm.models.world_model.config import DecoderFitConfig, TextDecoderConfig

    torch.manual_seed(0)
    fit, n_latent_flat = DecoderFitConfig(), 4 * 32  # the default encoder's latent: 4 tokens of 32
    decoder = TextDecoder(TextDecoderConfig(), [f" w{i}" for i in range(150)], n_latent_flat, 71)
    ids, z = torch.randint(2, 152, (fit.batch_size, 71)), torch.randn(fit.batch_size, n_latent_flat)
    opt = torch.optim.AdamW(decoder.parameters(), lr=fit.lr)
    t, steps = time.perf_counter(), 10
    for _ in range(steps):
        loss = decoder.loss(z, ids)
        opt.zero_grad()
        loss.backward()
        opt.step()
    step_s = (time.perf_counter() - t) / steps
    t = time.perf_counter()
    decoder.decode(torch.randn(64, n_latent_flat))
    return {
        "train_step_s": round(step_s, 3),
        "fit_decoder_s": round(step_s * fit.steps, 1),  # fit.decoder.steps of them, the replays aside
        "decode_ms_batch64": round((time.perf_counter() - t) * 1e3, 1),
    }


def autoregressive_speed() -> dict:
    """The autoregressive text world model at its default size: a training step on `batch_size` chunks of
    `chunk` tokens, and writing one state of 80 pieces for 96 rollouts (the builtin's states hold 42 pieces
    and a list of 34 on average)."""
    import numpy as np

    from adwm.models.autoregressive import AutoregressiveWorldModel
    from adwm.models.config import AutoregressiveConfig

    torch.manual_seed(0)
    cfg = AutoregressiveConfig()
    model = AutoregressiveWorldModel(cfg, [f" w{i}" for i in range(180)], [0.0, 0.5, 1.0])
    tokens = torch.randint(9, 189, (cfg.batch_size, cfg.chunk + 1))
    learn = torch.ones(cfg.batch_size, cfg.chunk, dtype=torch.bool)
    none = torch.full((cfg.batch_size, cfg.chunk), -1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    t, steps = time.perf_counter(), 10
    for _ in range(steps):
        y, _ = model(tokens[:, :-1], model.initial_state(cfg.batch_size))
        loss = sum(model.losses(y, tokens[:, 1:], learn, none, none).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    step_s = (time.perf_counter() - t) / steps
    model.eval()
    model.banned[:] = True  # write exactly 80 pieces: only the first piece is allowed
    model.banned[9] = False
    rngs = [np.random.default_rng(k) for k in range(96)]
    t = time.perf_counter()
    model.write(model.initial_state(96), rngs, 1.0, 80)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_step_s": round(step_s, 3),
        "fit_s": round(step_s * cfg.steps, 1),
        "write_state_ms_96_rollouts_80_pieces": round((time.perf_counter() - t) * 1e3, 1),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = {
            "machine": {
                "cpu_threads": torch.get_num_threads(),
                "python": platform.python_version(),
                "torch": torch.__version__,
            },
            "builtin_env": env_speed(),
            "agent": agent_speed(Path(tmp)),
            "text_decoder": decoder_speed(),
            "autoregressive": autoregressive_speed(),
            "provenance": benchmark_stamp(),
        }
    out = Path(__file__).parent / "results" / "speed.json"
    atomic_write_json(out, result)
    print(json.dumps(result, indent=2))
    print(out)


if __name__ == "__main__":
    main()
