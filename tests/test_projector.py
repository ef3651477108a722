"""Projector: soft-token reading matches text reading by construction, distillation lowers held-out KL,
the LoRA adapter is on only for soft reading, and a wrong embedding size fails with a named error."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
import torch

from adwm.models.config import ProjectorConfig
from adwm.models.projector import ProjectorModule, candidate_log_softmax
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.llm import LLMPolicy
from adwm.policies.soft_prompt import SoftPromptScorer
from adwm.stages.project import _batches, cap_candidates
from helpers import uniform_log_world_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory, bc_agent_dir):
    dm, wm = uniform_log_world_model(tmp_path_factory.mktemp("proj"), 30, 8, 0.3, 2)
    return dm, wm, bc_agent_dir


def policy(path: str, **over) -> LLMPolicy:
    return LLMPolicy(PolicyConfig(name="p", model=path, history_turns=0, **over))


def test_soft_tokens_equal_to_the_text_embeddings_reproduce_text_scores(setup):
    dm, _, lm = setup
    agent = policy(lm)
    scorer = SoftPromptScorer(agent)
    rows = dm.agent_states("train")[:6]
    after = agent.tokenizer("\n> ", add_special_tokens=False)["input_ids"]
    compared = 0
    for r in rows:
        ids = agent.tokenizer(r["observation"], add_special_tokens=False)["input_ids"]
        state = AgentState(r["task"], r["observation"], [], r["candidates"])
        if scorer._prefix(r["task"]) + ids + after != agent.prompt_ids(state):
            continue  # a BPE merge across a piece boundary: the two paths read different tokens
        soft = scorer.embedding(torch.tensor(ids))[None]  # the observation's own token embeddings
        got = scorer.scores([r["task"]], soft, [r["candidates"]])[0]
        text = torch.as_tensor(agent.action_scores([state])[0], dtype=torch.float32)
        torch.testing.assert_close(got.detach(), text, rtol=1e-4, atol=1e-4)
        compared += 1
    assert compared >= 4  # pieces tokenise like the whole prompt on builtin text


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
    from adwm.policies.config import TinyModelConfig
    from adwm.policies.tiny import make_tiny_llama

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


def test_cached_and_differentiable_soft_scoring_agree(setup):
    dm, _, lm = setup
    scorer = SoftPromptScorer(policy(lm))
    rows = dm.agent_states("train")[:5]
    soft = torch.randn(len(rows), 3, scorer.embed_dim) * 0.5
    tasks, cands = [r["task"] for r in rows], [r["candidates"] for r in rows]
    with torch.no_grad():
        cached = scorer.scores(tasks, soft, cands)  # one prompt pass, KV cache per candidate
    scorer.model.double()
    try:
        x = soft.double().requires_grad_(True)
        got = scorer.scores(tasks, x, cands)  # differentiable through the KV cache
        for a, b in zip(cached, got):
            torch.testing.assert_close(a.double(), b.detach(), rtol=1e-4, atol=1e-4)
        (grad,) = torch.autograd.grad(torch.cat(got).sum(), x)
        # reference: one full row [prefix, soft, suffix, action] per candidate, no cache, no padding
        ref = 0.0
        for i, (task, cs) in enumerate(zip(tasks, cands)):
            before = scorer.embedding(torch.tensor(scorer._prefix(task)))
            after = scorer.embedding(torch.tensor(scorer.after_ids))
            for act in cs:
                ids = list(scorer.policy._encode_action(act))
                emb = torch.cat([before, x[i], after, scorer.embedding(torch.tensor(ids))])[None]
                logp = torch.log_softmax(scorer.model(inputs_embeds=emb).logits[0], -1)
                first = emb.shape[1] - len(ids) - 1  # the position that predicts the first action token
                ref = ref + sum(logp[first + k, tok] for k, tok in enumerate(ids))
        (ref_grad,) = torch.autograd.grad(ref, x)
        assert float((grad - ref_grad).norm() / ref_grad.norm()) < 1e-6
    finally:
        scorer.model.float()


def test_candidate_cap_keeps_the_logged_action_and_the_logged_order():
    rng = np.random.default_rng(0)
    cands = [f"action {i}" for i in range(40)]
    states = [{"task": "t", "observation": "o", "candidates": cands, "logged": k} for k in (0, 17, 39)]
    states.append({"task": "t", "observation": "o", "candidates": cands[:5], "logged": 2})  # under the cap
    out = cap_candidates(states, 8, rng)
    for before, after in zip(states[:3], out[:3]):
        assert len(after["candidates"]) == 8
        assert after["candidates"][after["logged"]] == before["candidates"][before["logged"]]
        assert after["candidates"] == sorted(after["candidates"], key=cands.index)  # logged order kept
    assert out[3] == states[3] and cap_candidates(states, 0, rng) == states
