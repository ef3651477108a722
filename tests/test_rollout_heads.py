"""Reward and termination heads refitted on open-loop replays of the logged episodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adwm.models.world_model.config import RolloutHeadsConfig
from adwm.models.world_model.replay import (
    Replayed,
    episodes_of,
    refit_transition_heads,
    replay_open_loop,
    replay_returns,
)
from adwm.simulation.simulate import Window
from helpers import uniform_log_world_model


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    dm, wm = uniform_log_world_model(tmp_path_factory.mktemp("rollout_heads"), 24, 8, 0.25, 2)
    return wm.eval(), dm


def test_replay_has_one_row_per_logged_step_with_its_targets(world):
    wm, dm = world
    episodes = episodes_of(dm.train_items)
    assert sum(len(e) for e in episodes) == len(dm.train_items) and all(e[0]["t"] == 0 for e in episodes)
    data = replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(0), batch_size=5)  # several batches
    expected = [(i, x["t"], x["reward"], float(x["done"])) for i, e in enumerate(episodes) for x in e]
    got = sorted(zip(data.episode.tolist(), data.t.tolist(), data.reward.tolist(), data.done.tolist()))
    np.testing.assert_allclose(np.array(got), np.array(sorted(expected)), rtol=1e-6)
    # the first step's history is the logged first observation, encoded, and the logged action
    vocab = wm.vocab_embeddings()
    first = data.t == 0
    window = Window.start(
        wm.encode([dm.observations[e[0]["history_obs"][-1]] for e in episodes]),
        wm.encode([dm.tasks[e[0]["task"]] for e in episodes]),
        wm.hparams.window,
        vocab.size(1),
    )
    order = data.episode[first].argsort()
    torch.testing.assert_close(data.c[first][order], window.context(wm), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(data.a[first][order], vocab[torch.tensor([e[0]["action"] for e in episodes])])
    # open loop is reproducible from the generator's seed
    again = replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(0), batch_size=5)
    torch.testing.assert_close(again.z_next, data.z_next)


def test_replay_returns_against_a_numpy_reference(world):
    wm, _ = world
    rng = np.random.default_rng(0)
    episode = torch.tensor([0, 0, 0, 1, 1, 2])
    t = torch.tensor([0, 1, 2, 0, 1, 0])
    logged = torch.tensor(rng.uniform(0, 1, 6), dtype=torch.float32)
    n, d = wm.encoder.cfg.n_latents, wm.encoder.cfg.d_latent
    data = Replayed(
        torch.randn(6, n, d), torch.randn(6, wm.cfg.d_context), torch.randn(6, wm.cfg.d_action), logged,
        torch.zeros(6), episode, t,
    )  # fmt: skip
    with torch.no_grad():
        sim = wm.heads.transition(data.z_next, data.c, data.a)[0].numpy()
    gamma = 0.9
    disc = gamma ** t.numpy()
    sim_ret = np.array([(sim * disc)[episode.numpy() == i].sum() for i in range(3)])
    log_ret = np.array([(logged.numpy() * disc)[episode.numpy() == i].sum() for i in range(3)])
    out = replay_returns(wm, data, gamma)
    assert out["return_simulated"] == pytest.approx(sim_ret.mean(), rel=1e-5)
    assert out["return_logged"] == pytest.approx(log_ret.mean(), rel=1e-5)
    assert out["pearson"] == pytest.approx(np.corrcoef(sim_ret, log_ret)[0, 1], abs=1e-5)


def test_refit_moves_replayed_returns_to_the_logged_ones_and_changes_only_those_heads(world, tmp_path):
    wm, dm = world
    before = {k: v.clone() for k, v in wm.state_dict().items()}
    with torch.no_grad():  # an untrained reward head pays ~0.3 a step where the log pays ~0.02
        wm.heads.reward[-1].bias.fill_(0.3)
    cfg = RolloutHeadsConfig(passes=1, steps=300, batch_size=64, lr=3e-3)
    metrics = refit_transition_heads(wm, dm, cfg, gamma=0.95, seed=0)
    logged = metrics["rollout_heads/after_return_logged"]
    assert metrics["rollout_heads/before_return_logged"] == pytest.approx(logged)
    err_before = abs(metrics["rollout_heads/before_return_simulated"] - logged)
    err_after = abs(metrics["rollout_heads/after_return_simulated"] - logged)
    assert err_after < 0.25 * err_before, metrics
    assert metrics["rollout_heads/transitions"] == len(dm.train_items)
    changed = {k for k, v in wm.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith(("heads.reward.", "heads.termination.")) for k in changed), changed
    wm.load_state_dict(before)


def test_refit_settings_are_checked(world):
    wm, dm = world
    with pytest.raises(ValueError, match=r"fit.rollout_heads: passes, steps and batch_size must be at least 1"):
        refit_transition_heads(wm, dm, RolloutHeadsConfig(passes=0), 0.95, 0)


def test_snapped_replays_give_the_heads_logged_latents_and_need_a_bank(tmp_path):
    dm, wm = uniform_log_world_model(tmp_path, 16, 6, 0.25, 2)
    wm.eval()
    episodes = episodes_of(dm.train_items)
    with pytest.raises(RuntimeError, match=r"fit.rollout_heads.snap=true: the world model has no bank"):
        replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(0), snap=True)
    texts, admissible = dm.admissible_states("train")
    wm.build_proposal_bank(texts, admissible)
    bank = wm.proposal_bank.latents.flatten(1)

    def gap(data):  # each replayed latent's largest coordinate difference from the closest logged one
        return (data.z_next.flatten(1)[:, None, :].to(bank.dtype) - bank[None]).abs().amax(-1).min(1).values

    snapped = replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(0), snap=True)
    plain = replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(0))
    assert (gap(snapped) < 1e-5).all() and (gap(plain) > 1e-3).float().mean() > 0.5
    assert snapped.reward.numel() == plain.reward.numel() == len(dm.train_items)


def test_replays_snapped_by_action_land_on_states_the_logged_action_led_to(tmp_path):
    dm, wm = uniform_log_world_model(tmp_path, 16, 6, 0.25, 2)
    wm.eval()
    texts, admissible = dm.admissible_states("train")
    wm.build_proposal_bank(texts, admissible, dm.arrivals(texts))
    bank = wm.proposal_bank
    episodes = episodes_of(dm.train_items)
    data = replay_open_loop(wm, dm, episodes, torch.Generator().manual_seed(0), snap=True, by_action=True)
    index = bank.nearest(data.z_next)  # each replayed latent is a bank latent: this is its own index
    assert torch.equal(bank.latents[index].view_as(data.z_next), data.z_next.cpu())
    vocab = wm.vocab_embeddings()
    ids = torch.cdist(data.a, vocab).argmin(-1)  # the logged action of each replayed row
    led = bank.arrivals[:, ids].T.any(-1)  # the action led to some logged state
    assert led.float().mean() > 0.5
    assert bank.arrivals[index[led], ids[led]].all()  # and the snap kept to those states
