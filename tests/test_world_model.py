"""World model: shapes, classifier-free dropout, collapse guard, one-word sensitivity, save/load."""

from __future__ import annotations

from dataclasses import asdict

import lightning as L
import pytest
import torch

from adwm.data.collect import BehaviourEntry, CollectConfig, collect
from adwm.data.datamodule import DataConfig, TrajectoryDataModule
from adwm.diffusion.denoiser import DenoiserConfig
from adwm.diffusion.sampler import SamplerConfig
from adwm.encoders import EncoderConfig
from adwm.envs import EnvConfig
from adwm.models.world_model import WorldModelConfig, WorldModelModule
from adwm.policies.llm import PolicyConfig

ENC = EncoderConfig(name="tiny", n_latents=2, d_latent=8, d_model=32, layers=1, heads=2, vocab_size=400)


def wm_config(**over) -> WorldModelConfig:
    cfg = WorldModelConfig(
        d_action=16,
        d_context=32,
        history_layers=1,
        lr=3e-3,
        retrieval_candidates=8,
        denoiser=DenoiserConfig(hidden=64, layers=2),
        sampler=SamplerConfig(train_steps=20, steps=5),
    )
    for k, v in over.items():
        setattr(cfg, k, v)
    return cfg


@pytest.fixture(scope="module")
def dm(tmp_path_factory):
    out = tmp_path_factory.mktemp("wm") / "log.jsonl"
    cfg = CollectConfig(
        n_episodes=40, n_envs=8, out=str(out), behaviour=[BehaviourEntry(PolicyConfig(name="u", kind="uniform"), 1.0)]
    )
    collect(cfg, EnvConfig(max_steps=10), seed=0, progress=False)
    dm = TrajectoryDataModule(DataConfig(log=str(out), history=2, batch_size=16, val_fraction=0.2), seed=0)
    dm.setup()
    return dm


def make(dm, **over) -> WorldModelModule:
    torch.manual_seed(0)
    return WorldModelModule(asdict(ENC), asdict(wm_config(**over)), 2, dm.actions, texts=dm.observations)


def test_shapes_of_every_part(dm):
    wm = make(dm)
    batch = next(iter(dm.train_dataloader()))
    loss, logs, x = wm.model_step(batch)
    b, u, v = 16, len(batch["texts"]), len(dm.actions)
    assert torch.isfinite(loss) and set(logs) >= {"loss_denoise", "loss_reward", "loss_posterior", "loss_variance"}
    assert x["z"].shape == (u, 2, 8) and x["c"].shape == (b, 32) and x["a"].shape == (b, 16)
    assert x["vocab"].shape == (v, 16) and x["post"].shape == (b, v) and x["prop"].shape == (b, v)
    assert wm.denoise(torch.randn(b, 2, 8), torch.zeros(b, dtype=torch.long), x["c"], x["a"]).shape == (b, 2, 8)
    assert wm.sample_next(x["c"], x["a"], torch.Generator().manual_seed(0)).shape == (b, 2, 8)
    assert wm.action_encoder(["open the never seen vault"]).shape == (1, 16)  # text-based: unseen actions embed


def test_cfg_dropout_trains_prior_and_conditional(dm):
    batch = next(iter(dm.train_dataloader()))
    grads = {}
    for p in (0.0, 1.0):
        wm = make(dm, p_uncond=p, w_reward=0, w_done=0, w_posterior=0, w_proposal=0, w_variance=0)
        wm.model_step(batch)[0].backward()
        grads[p] = wm.null_action.grad
    assert grads[0.0] is None or grads[0.0].abs().sum() == 0  # the null action is never used
    assert grads[1.0].abs().sum() > 0  # always used
    wm = make(dm, p_uncond=0.5)
    _, _, x = wm.model_step(batch)
    z_t, t = torch.randn(16, 2, 8), torch.full((16,), 10)
    assert not torch.allclose(wm.denoise(z_t, t, x["c"], x["a"]), wm.denoise(z_t, t, x["c"], None))


def train(wm: WorldModelModule, dm, steps: int) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=2,
    )
    trainer.fit(wm, datamodule=dm)
    return trainer


def test_collapse_guard_keeps_latent_spread(dm):
    wm = make(dm)
    trainer = train(wm, dm, 120)
    z = wm.encoder(list(dm.observations[:200])).flatten(1)
    std = z.std(0)
    from adwm.models.metrics import effective_rank

    assert std.mean() > 0.5 and std.min() > 0.05  # floor: no dimension collapses
    assert effective_rank(z) > 3.0  # of 16 dimensions; a collapsed latent has rank ~1
    assert {"val/retrieval_top1_n8", "val/reward_mae", "val/latent_effective_rank"} <= set(trainer.callback_metrics)


def test_save_load_round_trip_keeps_vocabulary_and_outputs(dm, tmp_path):
    wm = make(dm)
    trainer = train(wm, dm, 3)
    path = tmp_path / "wm.ckpt"
    trainer.save_checkpoint(path)
    loaded = WorldModelModule.load_from_checkpoint(path).eval()
    wm.eval()
    assert loaded.actions == dm.actions
    texts = dm.observations[:5]
    torch.testing.assert_close(loaded.encoder(texts), wm.encoder(texts))
    torch.testing.assert_close(loaded.vocab_embeddings(), wm.vocab_embeddings())


def test_transformer_backbone_and_frozen_encoder(dm):
    batch = next(iter(dm.train_dataloader()))
    wm = make(dm, denoiser=DenoiserConfig(backbone="transformer", hidden=32, layers=1, heads=2))
    loss, _, _ = wm.model_step(batch)
    loss.backward()
    assert torch.isfinite(loss) and any(p.grad is not None for p in wm.denoiser.transformer.parameters())
    from dataclasses import replace

    torch.manual_seed(0)
    frozen = WorldModelModule(
        asdict(replace(ENC, trainable=False)), asdict(wm_config()), 2, dm.actions, texts=dm.observations
    )
    frozen.model_step(batch)[0].backward()
    assert all(p.grad is None for p in frozen.encoder.parameters())
    assert frozen.denoiser.inp.weight.grad is not None


def test_vicreg_terms_against_numpy():
    import numpy as np

    from adwm.models.world_model import _variance_covariance

    x = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 2.5], [2.0, 1.0, 2.0], [3.0, 0.5, 2.5]])
    var, cov = _variance_covariance(x)
    xn = x.numpy().astype(float)
    ref_var = np.maximum(0, 1 - xn.std(0, ddof=1)).mean()
    c = np.cov(xn, rowvar=False)
    ref_cov = ((c - np.diag(np.diag(c))) ** 2).sum() / 3
    assert var.item() == pytest.approx(ref_var, rel=1e-5) and cov.item() == pytest.approx(ref_cov, rel=1e-5)
    same = torch.ones(5, 3)  # a collapsed batch pays the full variance penalty
    assert _variance_covariance(same)[0].item() == pytest.approx(1.0)
