"""Projector: soft-token reading matches text reading by construction, distillation lowers held-out KL,
the LoRA adapter is on only for soft reading, and a wrong embedding size fails with a named error."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from adwm.data.collect import BehaviourEntry, CollectConfig, collect
from adwm.data.datamodule import DataConfig, TrajectoryDataModule
from adwm.diffusion.denoiser import DenoiserConfig
from adwm.diffusion.sampler import SamplerConfig
from adwm.encoders import EncoderConfig
from adwm.envs import EnvConfig
from adwm.models.projector import ProjectorConfig, ProjectorModule, candidate_log_softmax
from adwm.models.world_model import WorldModelConfig, WorldModelModule
from adwm.policies.base import AgentState
from adwm.policies.llm import LLMPolicy, PolicyConfig
from adwm.policies.soft_prompt import SoftPromptScorer
from adwm.project import _batches


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_lm_dir):
    out = tmp_path_factory.mktemp("proj") / "log.jsonl"
    uniform = BehaviourEntry(PolicyConfig(name="u", kind="uniform"), 1.0)
    collect(CollectConfig(n_episodes=30, n_envs=8, out=str(out), behaviour=[uniform]), EnvConfig(max_steps=8), 0, False)
    dm = TrajectoryDataModule(DataConfig(log=str(out), batch_size=16, val_fraction=0.3), seed=0)
    dm.setup()
    torch.manual_seed(0)
    enc = EncoderConfig(n_latents=2, d_latent=8, d_model=32, layers=1, heads=2, vocab_size=400)
    wm_cfg = WorldModelConfig(
        d_action=16,
        d_context=32,
        history_layers=1,
        denoiser=DenoiserConfig(hidden=32, layers=1),
        sampler=SamplerConfig(train_steps=10, steps=2),
    )
    wm = WorldModelModule(asdict(enc), asdict(wm_cfg), 2, dm.actions, texts=dm.observations)
    return dm, wm, tiny_lm_dir


def policy(path: str, **over) -> LLMPolicy:
    return LLMPolicy(PolicyConfig(name="p", model=path, history_turns=0, **over))


def test_soft_tokens_equal_to_the_text_embeddings_reproduce_text_scores(setup):
    dm, _, lm = setup
    agent = policy(lm)
    scorer = SoftPromptScorer(agent)
    rows = dm.agent_states("train")[:4]
    obs_ids = [agent.tokenizer(r["observation"], add_special_tokens=False)["input_ids"] for r in rows]
    for r, ids in zip(rows, obs_ids):
        soft = scorer.embedding(torch.tensor(ids))[None]  # the observation's own token embeddings
        got = scorer.scores([r["task"]], soft, [r["candidates"]])[0]
        # reference: the text path on exactly these ids (prefix, observation, suffix tokenised apart)
        state = AgentState(r["task"], r["observation"], [], r["candidates"])
        text = torch.as_tensor(agent.action_scores([state])[0], dtype=torch.float32)
        if scorer._prefix(r["task"]) + ids + agent.tokenizer("\n> ", add_special_tokens=False)["input_ids"] == (
            agent.prompt_ids(state)
        ):
            torch.testing.assert_close(got.detach(), text, rtol=1e-4, atol=1e-4)


def test_distillation_lowers_held_out_kl(setup):
    dm, wm, lm = setup
    agent = policy(lm)
    torch.manual_seed(0)
    cfg = ProjectorConfig(n_tokens=4, hidden=64, lr=3e-3, w_ce=0.0)
    module = ProjectorModule(asdict(cfg), (2, 8), lm).attach(wm, agent)
    train, val = dm.agent_states("train"), dm.agent_states("val")
    val_batch = next(iter(_batches(val[:64], 64, False, 0)))
    with torch.no_grad():
        before = module.distill_step(val_batch)["kl"].item()
    opt = module.configure_optimizers()
    for epoch in range(3):
        for batch in _batches(train, 16, True, epoch):
            loss = module.distill_step(batch)["loss"]
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        after = module.distill_step(val_batch)["kl"].item()
    assert after < 0.7 * before, (before, after)


def test_lora_adapter_is_active_only_for_soft_reading(setup):
    dm, wm, lm = setup
    plain, adapted = policy(lm), policy(lm)
    module = ProjectorModule(asdict(ProjectorConfig(n_tokens=2, hidden=16, lora=True, lora_r=2)), (2, 8), lm)
    module.attach(wm, adapted)
    with torch.no_grad():
        for p in module.adapter_parameters():
            p.add_(0.5)  # a non-trivial adapter
    r = dm.agent_states("train")[0]
    text = module.text_scores([r["task"]], [r["observation"]], [r["candidates"]])[0]
    ref = torch.as_tensor(plain.action_scores([AgentState(r["task"], r["observation"], [], r["candidates"])])[0])
    torch.testing.assert_close(text, ref.float(), rtol=1e-5, atol=1e-5)  # teacher: adapter off
    soft = module.soft_scores(wm.encode([r["observation"]]), [r["task"]], [r["candidates"]])[0]
    soft.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.adapter_parameters())
    assert candidate_log_softmax([soft])[0].exp().sum().item() == pytest.approx(1.0, abs=1e-5)


def test_agent_with_other_embedding_size_fails_with_a_named_error(setup, tmp_path):
    from adwm.policies.tiny import TinyModelConfig, make_tiny_llama

    dm, wm, lm = setup
    module = ProjectorModule(asdict(ProjectorConfig(n_tokens=2, hidden=16)), (2, 8), lm).attach(wm, policy(lm))
    wide = tmp_path / "wide"
    agent = policy(lm)
    make_tiny_llama(
        TinyModelConfig(hidden_size=48, intermediate_size=64, num_layers=1, num_heads=2), agent.tokenizer
    ).save_pretrained(wide)
    agent.tokenizer.save_pretrained(wide)
    with pytest.raises(ValueError, match="trained for agents with 32-dim input embeddings, but 'p' has 48"):
        module.attach(wm, policy(str(wide)))
    scorer = SoftPromptScorer(policy(str(wide)))
    with pytest.raises(ValueError, match="soft tokens have size 32 but the agent's input embeddings have 48"):
        scorer.scores(["t"], torch.zeros(1, 2, 32), [["look"]])
