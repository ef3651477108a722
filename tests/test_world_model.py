"""World model: shapes, classifier-free dropout, collapse guard, one-word sensitivity, save/load."""

from __future__ import annotations

import re
from dataclasses import asdict

import lightning as L
import numpy as np
import pytest
import torch

from adwm.data.config import DataConfig
from adwm.data.datamodule import TrajectoryDataModule
from adwm.diffusion.config import DenoiserConfig, SamplerConfig
from adwm.encoders.config import EncoderConfig
from adwm.envs import EnvConfig
from adwm.models.history import HistoryEncoder
from adwm.models.world_model import WorldModelConfig, WorldModelModule
from adwm.models.world_model.diagnostics import effective_rank
from adwm.policies.config import PolicyConfig
from adwm.stages.collect import collect
from adwm.stages.config import BehaviourEntry, CollectConfig

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


def make(dm, enc: EncoderConfig = ENC, **over) -> WorldModelModule:
    torch.manual_seed(0)
    return WorldModelModule(asdict(enc), asdict(wm_config(**over)), 2, dm.actions, texts=dm.observations)


# the latent-sensitivity tests need a little more room than the shape tests: 4 x 16 latents, 2 layers
ENC_TRAINED = EncoderConfig(name="tiny", n_latents=4, d_latent=16, d_model=32, layers=2, heads=2, vocab_size=400)


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


@pytest.fixture(scope="module")
def dm32(dm):
    out = TrajectoryDataModule(DataConfig(log=dm.cfg.log, history=2, batch_size=32, val_fraction=0.2), seed=0)
    out.setup()
    return out


@pytest.fixture(scope="module")
def trained(dm32):
    """A world model after a short run (300 steps)."""
    wm = make(dm32, ENC_TRAINED)
    trainer = train(wm, dm32, 300)
    return wm.eval(), trainer


def test_collapse_guard_keeps_latent_spread(trained, dm32):
    wm, trainer = trained
    with torch.no_grad():
        z = wm.encoder(list(dm32.observations[:200])).flatten(1)
    std = z.std(0)
    assert std.mean() > 0.5 and std.min() > 0.05  # floor: no dimension collapses
    assert effective_rank(z) > 6.0  # of 64 dimensions; a collapsed latent has rank ~1
    assert {"val/retrieval_top1_n8", "val/reward_mae", "val/latent_effective_rank"} <= set(trainer.callback_metrics)


def _one_word_ratio(wm: WorldModelModule, texts: list[str]) -> float:
    """Mean latent distance of "door ... closed" -> "door ... open" pairs over the median distance of
    random pairs of distinct logged observations."""
    closed = [t for t in texts if re.search(DOOR_CLOSED, t)][:32]
    opened = [re.sub(DOOR_CLOSED, r"\1 open", t, count=1) for t in closed]
    with torch.no_grad():
        a, b = wm.encoder(closed).flatten(1), wm.encoder(opened).flatten(1)
        z = wm.encoder(texts[:200]).flatten(1)
    d_pair = (a - b).norm(dim=-1).mean()
    d_rand = torch.pdist(z).median()
    return float(d_pair / d_rand)


DOOR_CLOSED = r"(The door to the [a-z ]+ is) closed"


def test_one_word_that_changes_dynamics_moves_the_latent(trained, dm32):
    wm, _ = trained
    texts = list(dm32.observations)
    assert sum(bool(re.search(DOOR_CLOSED, t)) for t in texts) >= 10
    no_guard = make(dm32, ENC_TRAINED, w_tokens=0.0)  # the same run without the token-reconstruction guard
    train(no_guard, dm32, 300)
    guarded, unguarded = _one_word_ratio(wm, texts), _one_word_ratio(no_guard.eval(), texts)
    # "closed" -> "open" changes which actions exist. With the guard it moves the latent by a clear share
    # of the distance between unrelated observations (measured 0.082 here) and over twice as much as
    # without it (measured 0.034; the other heads alone move it a little)
    assert guarded > 0.06 and guarded > 2 * unguarded, (guarded, unguarded)


class _WindowItself(torch.nn.Module):
    def forward(self, z_hist, prev_a, mask, task):
        return z_hist


def test_context_noise_has_the_drawn_spread_and_acts_in_training_only(dm):
    """History latents get noise of std ~ U(0, s) per row: the mean squared change per element is s^2 / 3
    (a stub history encoder returns the noisy window itself); a training step's context is noisy, an
    evaluation step's (what validation and simulation read) is not."""
    wm = make(dm, context_noise=0.6)
    batch = next(iter(dm.train_dataloader()))
    z = torch.randn(50, 2, 8)
    hist = torch.randint(0, 50, (4000, 2))
    acts = torch.zeros(4000, 2, dtype=torch.long)
    history = wm.history
    wm.history = _WindowItself()
    try:
        torch.manual_seed(0)
        noisy = wm.context(z, hist, acts, torch.zeros(3, 16), torch.zeros(4000, dtype=torch.long), 0.6)
    finally:
        wm.history = history
    change = (noisy - z[hist]).pow(2).mean()
    assert float(change) == pytest.approx(0.6**2 / 3, rel=0.05)
    wm.train()
    c1, c2 = (wm.model_step(batch)[2]["c"] for _ in range(2))
    assert not torch.allclose(c1, c2)
    wm.eval()
    c1, c2 = (wm.model_step(batch)[2]["c"] for _ in range(2))
    torch.testing.assert_close(c1, c2)


def test_context_reads_the_task(dm):
    wm = make(dm).eval()
    batch = next(iter(dm.train_dataloader()))
    with torch.no_grad():
        z = wm.encode(batch["texts"])
        vocab = wm.vocab_embeddings()
        args = (z, batch["history_obs"], batch["history_actions"], vocab)
        c = wm.context(*args, batch["task"])
        c_other = wm.context(*args, torch.zeros_like(batch["task"]))  # another text in the task's place
    assert (c - c_other).abs().amax(-1).min() > 1e-3


def test_history_reads_the_first_and_the_recent_latents_only():
    """history_latents = 1: the context reads the episode's first latent, the current one and every action,
    never a latent in between nor a padding position; with 0 it reads them all."""
    torch.manual_seed(0)
    z, a, task = torch.randn(2, 5, 2, 8), torch.randn(2, 5, 16), torch.randn(2, 2, 8)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)  # row 0 starts at position 2

    def change(history, pos: int, of: str = "z") -> torch.Tensor:
        z2, a2 = z.clone(), a.clone()
        (z2 if of == "z" else a2)[:, pos] += 3.0
        with torch.no_grad():
            return (history(z2, a2, mask, task) - history(z, a, mask, task)).abs().amax(-1)

    history = HistoryEncoder(2, 8, 16, 32, window=5, layers=1, recent_latents=1)
    assert change(history, 2)[0] > 1e-4 and change(history, 0)[1] > 1e-4  # each row's first latent
    assert (change(history, 4) > 1e-4).all()  # the current latent
    assert change(history, 3)[0] == 0 and (change(history, 1)[1], change(history, 2)[1]) == (0, 0)
    assert change(history, 0)[0] == 0  # padding
    assert (change(history, 3, of="a") > 1e-4).all()  # actions are read at every real position
    every = HistoryEncoder(2, 8, 16, 32, window=5, layers=1)
    assert (change(every, 3) > 1e-4).all()
    with pytest.raises(ValueError, match="world_model.history_latents"):
        HistoryEncoder(2, 8, 16, 32, window=5, recent_latents=-1)


def test_near_view_keeps_the_last_steps_and_remaps_indices():
    from adwm.models.world_model.latents import near_view as _near_view

    texts = ["o0", "o1", "o2", "o3", "task"]
    hist = torch.tensor([[0, 1, 2], [-1, 1, 2]])
    texts2, near, nxt, task = _near_view(texts, hist, torch.tensor([3, 3]), torch.tensor([4, 4]), window=2)
    assert texts2 == ["o1", "o2", "o3", "task"]  # o0 lies outside the near window: not encoded
    assert near.tolist() == [[-1, 0, 1], [-1, 0, 1]] and nxt.tolist() == [2, 2] and task.tolist() == [3, 3]


def test_freeze_encoder_caches_latents_and_trains_only_the_rest(dm):
    wm = make(dm)
    train(wm, dm, 5)
    wm.freeze_encoder()
    enc = {k: v.clone() for k, v in wm.encoder.state_dict().items()}
    den = wm.denoiser.inp.weight.detach().clone()
    for a, b in zip(wm.encoder.parameters(), wm.target_encoder.parameters()):
        assert torch.equal(a, b)  # one latent space from here on
    train(wm, dm, 20)
    assert all(torch.equal(v, wm.encoder.state_dict()[k]) for k, v in enc.items())
    assert not torch.equal(den, wm.denoiser.inp.weight)
    text = dm.observations[0]
    wm.target_encoder.eval()
    with torch.no_grad():
        direct = wm.target_encoder([text])[0]
    assert text in wm._latents and torch.allclose(wm._latents[text], direct, atol=1e-5)


def test_encode_runs_each_distinct_text_once_and_caches_a_frozen_encoder(dm):
    wm = make(dm).eval()
    texts = [dm.observations[i] for i in (0, 1, 0, 2, 1, 0)]
    seen: list[int] = []
    wm.target_encoder.register_forward_hook(lambda mod, inp, out: seen.append(len(inp[0])))
    with torch.no_grad():
        reference = torch.stack([wm.target_encoder([t])[0] for t in texts])
    seen.clear()
    z = wm.encode(texts, batch_size=2)
    assert seen == [2, 1]  # three distinct texts, batches of two
    assert torch.allclose(z, reference, atol=1e-5)
    wm.freeze_encoder()
    wm.encode(texts)
    seen.clear()
    again = wm.encode(list(reversed(texts)))
    assert seen == []  # a frozen encoder's latents come from the cache
    assert torch.allclose(again, reference.flip(0), atol=1e-5)


def test_calibrated_edit_head_proposes_the_logged_number_of_actions(dm):
    wm = make(dm)
    train(wm, dm, 20)
    wm.eval()
    batches = [b for _, b in zip(range(3), dm.train_dataloader())]
    wm.calibrate_next_proposal(batches)
    got = true = 0
    with torch.no_grad():
        for b in batches:
            both = b["has_admissible"] & b["has_next_admissible"]
            z = wm.encode(b["texts"])
            vocab = wm.vocab_embeddings()
            c = wm.context(z, b["history_obs"], b["history_actions"], vocab, b["task"])
            a = vocab[b["history_actions"][:, -1]]
            logits = wm.heads.next_proposal_logits(z[b["next_obs"]], c, a, b["admissible"], vocab)
            got += int((logits[both] > wm.next_proposal_threshold).sum())
            true += int(b["next_admissible"][both].sum())
    assert got == true


def _edit_head_inputs(wm, dm):
    """The edit head's inputs on a training batch (encoded latents) and its logits."""
    b = next(iter(dm.train_dataloader()))
    with torch.no_grad():
        z = wm.encode(b["texts"])
        vocab = wm.vocab_embeddings()
        c = wm.context(z, b["history_obs"], b["history_actions"], vocab, b["task"])
        a = vocab[b["history_actions"][:, -1]]
        z_next, prev = z[b["next_obs"]], b["admissible"]
        return z_next, c, a, prev, wm.heads.next_proposal_logits(z_next, c, a, prev, vocab)


def test_candidate_cap_keeps_the_highest_edit_head_scores(dm):
    wm = make(dm).eval()
    z_next, c, a, prev, logits = _edit_head_inputs(wm, dm)
    wm.next_proposal_threshold.fill_(-1e9)  # an uncalibrated head that proposes the whole vocabulary
    full = wm.propose_next(z_next, c, a, prev)
    assert bool(full.all())
    k = 3
    capped = wm.propose_next(z_next, c, a, prev, max_candidates=k)
    assert (capped.sum(-1) == k).all()
    for row, lg in zip(capped, logits):
        assert set(torch.nonzero(row).flatten().tolist()) == set(lg.topk(k).indices.tolist())
    wm.next_proposal_threshold.fill_(1e9)  # nothing passes: the fallback sets are capped too
    assert (wm.propose_next(z_next, c, a, prev, max_candidates=k).sum(-1) <= k).all()
    assert torch.equal(
        wm.propose_next(z_next, c, a, prev, max_candidates=len(wm.actions)), wm.propose_next(z_next, c, a, prev)
    )


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

    from adwm.models.world_model.objectives import variance_covariance as _variance_covariance

    x = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 2.5], [2.0, 1.0, 2.0], [3.0, 0.5, 2.5]])
    var, cov = _variance_covariance(x)
    xn = x.numpy().astype(float)
    ref_var = np.maximum(0, 1 - xn.std(0, ddof=1)).mean()
    c = np.cov(xn, rowvar=False)
    ref_cov = ((c - np.diag(np.diag(c))) ** 2).sum() / 3
    assert var.item() == pytest.approx(ref_var, rel=1e-5) and cov.item() == pytest.approx(ref_cov, rel=1e-5)
    same = torch.ones(5, 3)  # a collapsed batch pays the full variance penalty
    assert _variance_covariance(same)[0].item() == pytest.approx(1.0)


def test_contrastive_loss_against_numpy():
    import numpy as np

    wm_cfg = wm_config(temperature=0.5)
    pred = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
    keys = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 3.0], [0.0, 1.0, 1.0]])
    target = torch.tensor([0, 2])
    from adwm.models.world_model.objectives import contrastive_loss

    got = contrastive_loss(pred, keys, target, wm_cfg.temperature)
    p, k = pred.numpy(), keys.numpy()
    cos = (p / np.linalg.norm(p, axis=1, keepdims=True)) @ (k / np.linalg.norm(k, axis=1, keepdims=True)).T / 0.5
    ref = np.mean([np.log(np.exp(row).sum()) - row[j] for row, j in zip(cos, target.numpy())])
    assert got.item() == pytest.approx(ref, rel=1e-5)


def test_proposal_bank_returns_the_nearest_logged_set():
    from adwm.models.proposal_bank import ProposalBank

    bank = ProposalBank.build(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 5.0]]), [[0, 2], [1], [3]], 4)
    query = torch.tensor([[0.9, 0.1], [0.1, 4.0], [-1.0, -1.0]])
    assert bank.lookup(query).tolist() == [
        [False, True, False, False],
        [False, False, False, True],
        [True, False, True, False],
    ]
    assert bank.nearest(query, chunk=1).tolist() == [1, 2, 0]  # chunked search finds the same neighbours
    with pytest.raises(ValueError, match="no logged state with an admissible list"):
        ProposalBank.build(torch.zeros(0, 2), [], 4)


def test_snapping_by_action_keeps_to_the_states_the_action_led_to():
    from adwm.models.proposal_bank import ProposalBank, action_ids

    latents = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 5.0]])
    # state 0 is a start (no action led to it); action 0 led to state 1, actions 1 and 2 to state 2
    bank = ProposalBank.build(latents, [[0], [1], [2]], 4, arrivals=[[], [0], [1, 2]])
    query = torch.tensor([[0.0, 4.0], [1.0, 0.1], [0.0, 0.1], [0.0, 0.1], [0.0, 0.1]])
    assert bank.nearest(query).tolist() == [2, 1, 0, 0, 0]  # no actions: the plain nearest state
    # action 0 -> only state 1; action 1 -> state 2; action 3 led nowhere and -1 is unknown: every state competes
    got = bank.nearest(query, torch.tensor([0, 1, 2, 3, -1]), chunk=2)
    assert got.tolist() == [1, 2, 2, 0, 0]
    snapped, index = bank.snap(query.view(5, 1, 2), torch.tensor([0, 1, 2, 3, -1]))
    assert snapped.shape == (5, 1, 2) and torch.equal(snapped.view(5, 2), latents[index])
    again = ProposalBank.from_state_dict(bank.state_dict())  # the arrivals are saved with the bank
    assert torch.equal(again.nearest(query, torch.tensor([0, 1, 2, 3, -1])), got)
    old = {k: v for k, v in bank.state_dict().items() if k != "arrivals"}  # a bank saved before arrivals
    assert ProposalBank.from_state_dict(old).nearest(query, torch.tensor([0, 1, 2, 3, -1])).tolist() == [2, 1, 0, 0, 0]
    assert action_ids(["go", "take"], ["take", "jump", "go"]).tolist() == [1, -1, 0]
    with pytest.raises(ValueError, match="3 states but 2 arrival lists"):
        ProposalBank.build(latents, [[0], [1], [2]], 4, arrivals=[[], [0]])


def test_snapping_within_the_world_keeps_to_the_rollouts_world_where_it_saw_the_outcome():
    from adwm.models.proposal_bank import ProposalBank

    latents = torch.tensor([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [0.0, 5.0]])
    # action 0 led to states 1 (seen in world 0) and 2 (world 1); action 1 to state 3 (world 1 only)
    bank = ProposalBank.build(latents, [[0], [1], [1], [2]], 3, arrivals=[[], [0], [0], [1]])
    query = torch.tensor([[1.1, 0.0], [1.1, 0.0], [0.0, 4.0], [0.0, 4.0], [1.1, 0.0], [1.1, 0.0]])
    actions = torch.tensor([0, 0, 1, 1, 0, 2])
    with pytest.raises(RuntimeError, match="attach_worlds"):
        bank.nearest(query, actions, torch.zeros(6, dtype=torch.long))
    bank.attach_worlds([[0, 1], [0], [1], [1]], 2)
    worlds = torch.tensor([0, 1, 1, 0, -1, 1])
    # row 1: world 1 saw action 0 lead to state 2, so the nearer state 1 (world 0) is passed over; row 3:
    # world 0 never saw action 1's outcome, so the action's outcome anywhere (state 3); row 4: no world;
    # row 5: action 2 led nowhere, so every state of world 1 competes (state 0 is nearest)
    assert bank.nearest(query, actions).tolist() == [1, 1, 3, 3, 1, 1]
    assert bank.nearest(query, actions, worlds, chunk=3).tolist() == [1, 2, 3, 3, 1, 0]
    assert bank.nearest(query, None, worlds).tolist() == [1, 0, 3, 0, 1, 0]  # within the world alone
    # staying in the world: row 3 keeps to world 0's states although world 0 never showed action 1's outcome
    assert bank.nearest(query, actions, worlds, stay_in_world=True).tolist() == [1, 2, 3, 0, 1, 0]
    snapped, index = bank.snap(query.view(6, 1, 2), actions, worlds)
    assert index.tolist() == [1, 2, 3, 3, 1, 0] and torch.equal(snapped.view(6, 2), latents[index])
    with pytest.raises(ValueError, match="4 states but 3 world lists"):
        bank.attach_worlds([[0], [0], [1]], 2)
    from adwm.simulation.config import DiffusionConfig

    with pytest.raises(
        ValueError, match=r"evaluate.diffusion.snap_world: expected one of \['none', 'outcome', 'state'\]"
    ):
        DiffusionConfig(snap_world="yes")


def test_snapping_by_transition_keeps_to_the_logged_successors_of_the_state_and_action():
    from adwm.models.proposal_bank import ProposalBank

    latents = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    texts = ["a", "b", "c", "d"]
    bank = ProposalBank.build(latents, [[0]] * 4, 3, texts=texts, arrivals=[[], [0], [0], [0, 1]])
    bank.attach_worlds([[0, 1], [0, 1], [1], [1]], 2)
    # the log: from state 0 action 0 led to state 1 in world 0 and to state 2 in world 1; from state 1
    # actions 0 and 1 led to state 3 in world 1
    bank.attach_transitions([(0, 0, 1, 0, 0.5), (0, 0, 2, 1, 0.0), (1, 0, 3, 1, 1.0), (1, 1, 3, 1, 0.25)])
    assert bank.index_of(["c", "zz", "a"]).tolist() == [2, -1, 0]
    query = torch.full((6, 2), 2.9)  # nearest to state 3 wherever it may go
    states = torch.tensor([0, 0, 1, 1, -1, 2])
    actions = torch.tensor([0, 0, 1, 0, 0, 0])
    worlds = torch.tensor([0, 1, 0, 0, 0, 1])
    moves = (states, actions)
    # the outcome rule alone: row 1 takes action 0's nearest outcome in world 1 (state 3), row 3 the one
    # in world 0 (state 1)
    assert bank.nearest(query, actions, worlds).tolist() == [1, 3, 3, 1, 1, 3]
    # by transition: row 1 keeps to what state 0 led to in world 1 (state 2); rows 2, 3: world 0 never
    # left state 1 by those actions (world 1 did: not its rollouts' business), nor did any world leave row
    # 5's state by action 0, and row 4 has no known state: they keep the outcome rule
    assert bank.nearest(query, actions, worlds, moves=moves).tolist() == [1, 2, 3, 1, 1, 3]
    # every world alike: the successors in any world compete
    assert bank.nearest(query, actions, None, moves=moves).tolist() == [2, 2, 3, 3, 3, 3]
    snapped, index = bank.snap(query.view(6, 1, 2), actions, worlds, moves=moves)
    assert index.tolist() == [1, 2, 3, 1, 1, 3] and torch.equal(snapped.view(6, 2), latents[index])
    # the logged reward of each row's transition in its world; NaN where its world never logged it
    paid = bank.logged_rewards(states, actions, index, worlds)
    assert paid[:2].tolist() == [0.5, 0.0] and paid[2:].isnan().all()
    both = torch.tensor([0, 0])  # every world alike: state 0 by action 0 to state 1 was logged in world 0 only
    assert bank.logged_rewards(both, both, torch.tensor([1, 3]), None)[0] == 0.5
    with pytest.raises(ValueError, match=r"transition \[0, 5, 1, 0\] is outside 4 states / 3 actions"):
        bank.attach_transitions([(0, 5, 1, 0, 0.0)])


def test_the_data_module_lists_the_logged_transitions_between_bank_states(dm):
    texts, _ = dm.admissible_states("train")
    named = {
        (dm.tasks[x["task"]], dm.observations[x["history_obs"][-1]]): x["world"] for x in dm.train_items if x["t"] == 0
    }
    at = {t: i for i, t in enumerate(texts)}
    expected: dict[tuple, list[float]] = {}  # from the episodes themselves, not the items
    for ep in dm.train_episodes:
        world = named[(ep.task, ep.steps[0].observation)]
        after = [s.observation for s in ep.steps[1:]] + [ep.final_observation]
        for step, nxt in zip(ep.steps, after):
            if step.observation in at and nxt in at and step.action in dm.actions:
                key = (at[step.observation], dm.actions.index(step.action), at[nxt], world)
                expected.setdefault(key, []).append(step.reward)
    got = dm.transitions(texts)
    assert [row[:4] for row in got] == sorted(expected) and len(got) > 0
    for row in got:
        assert row[4] == pytest.approx(np.mean(expected[row[:4]]))


def test_the_data_module_says_in_which_logged_world_each_state_was_seen(dm):
    texts, _ = dm.admissible_states("train")
    worlds = dm.state_worlds(texts)
    starts = {(ep.task, ep.steps[0].observation) for ep in dm.train_episodes + dm.val_episodes}
    assert dm.n_worlds == len(starts)
    seen: dict[str, set] = {}  # from the episodes themselves: a world is its task and first observation
    for ep in dm.train_episodes:
        for obs in [s.observation for s in ep.steps] + [ep.final_observation]:
            seen.setdefault(obs, set()).add((ep.task, ep.steps[0].observation))
    named = {
        x["world"]: (dm.tasks[x["task"]], dm.observations[x["history_obs"][-1]]) for x in dm.train_items if x["t"] == 0
    }
    assert [{named[w] for w in ws} for ws in worlds] == [seen[t] for t in texts]
    from adwm.simulation.starts import logged_starts

    assert all(named.get(s.world, (s.task, s.observation)) == (s.task, s.observation) for s in logged_starts(dm))
    assert sorted({s.world for s in logged_starts(dm)}) == list(range(dm.n_worlds))


def test_the_bank_of_a_fit_records_the_logged_actions_that_led_to_each_state(dm):
    texts, admissible = dm.admissible_states("train")
    arrivals = dm.arrivals(texts)
    led: dict[str, set[str]] = {}  # from the episodes themselves, not the items
    for ep in dm.train_episodes:
        for step, nxt in zip(ep.steps, [*ep.steps[1:], None]):
            if nxt is not None and step.action.strip():
                led.setdefault(nxt.observation, set()).add(step.action)
    assert [{dm.actions[a] for a in arr} for arr in arrivals] == [led.get(t, set()) for t in texts]
    assert any(arrivals) and not all(arrivals)  # first observations of the logged episodes: no action led there


def test_proposal_modes_fall_back_to_retrieval_and_the_bank_is_saved(dm, tmp_path):
    wm = make(dm).eval()
    texts, admissible = dm.admissible_states("train")
    z = wm.encode(texts)
    with pytest.raises(RuntimeError, match="no proposal bank"):
        wm.propose(z, "retrieval")
    with pytest.raises(ValueError, match="world_model.proposal: unknown mode 'oracle'"):
        wm.propose(z, "oracle")
    wm.build_proposal_bank(texts, admissible)
    true = torch.zeros(len(texts), len(dm.actions), dtype=torch.bool)
    for i, ids in enumerate(admissible):
        true[i, ids] = True
    assert torch.equal(wm.propose(z, "retrieval"), true)  # a logged state retrieves itself
    with torch.no_grad():
        wm.heads.proposal.bias.fill_(-1e4)  # a head that proposes nothing ...
    assert torch.equal(wm.propose(z, "head"), true)  # ... falls back to the nearest logged state
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_steps=0)
    trainer.strategy.connect(wm)
    path = tmp_path / "bank.ckpt"
    trainer.save_checkpoint(path)
    loaded = WorldModelModule.load_from_checkpoint(path).eval()
    assert torch.equal(loaded.propose(loaded.encode(texts), "retrieval"), true)


def test_token_decoder_loss_against_a_manual_reference():
    import torch.nn.functional as F

    from adwm.models.token_decoder import TokenDecoder

    torch.manual_seed(0)
    dec = TokenDecoder(d_z_flat=4, vocab_size=10, context=2, d_embed=3, hidden=8)
    z = torch.randn(2, 1, 4)
    ids = [torch.tensor([3, 13, 5]), torch.tensor([7])]  # 13 is predicted as 13 % 10 = 3
    got = dec.loss(z, ids, positions=4, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(1)
    feats, targets = [], []
    for u, seq in enumerate(ids):
        seq = seq % 10
        for p in torch.randint(0, len(seq), (4,), generator=gen).tolist():
            before = [10, 10] + seq.tolist()  # two "before the text" ids, then the text
            ctx = torch.tensor(before[p : p + 2])  # the two tokens left of position p
            feats.append(torch.cat([z[u].flatten(), dec.embed(ctx).flatten()]))
            targets.append(int(seq[p]))
    ref = F.cross_entropy(dec.net(torch.stack(feats)), torch.tensor(targets))
    assert got.item() == pytest.approx(ref.item(), rel=1e-6)


def test_sampled_candidate_sets_include_each_action_with_the_head_probability(dm):
    """With a generator, an action joins the next set with probability sigmoid(edit-head logit): over many
    draws the inclusion frequency matches the probability computed here from the logits; a seed fixes
    the draw; without a generator the set is the calibrated cut."""
    wm = make(dm).eval()
    z_next, c, a, prev, logits = _edit_head_inputs(wm, dm)
    wm.next_proposal_threshold.fill_(1.0)  # the cut plays no part in a draw
    prob = 1.0 / (1.0 + np.exp(-logits.double().numpy()))
    # an empty draw falls back to the deterministic set F: P(j in set) = p_j + prod_k (1 - p_k) * [j in F]
    empty_fallback = _fallback(wm, z_next, torch.full_like(logits, -1e9)).double().numpy()
    expected = prob + np.prod(1 - prob, axis=-1, keepdims=True) * empty_fallback
    n = 400
    gen = torch.Generator().manual_seed(0)
    freq = sum(wm.propose_next(z_next, c, a, prev, generator=gen).double().numpy() for _ in range(n)) / n
    assert np.abs(freq - expected).max() < 5 * np.sqrt(0.25 / n)
    assert np.abs(freq - (logits > 1.0).double().numpy()).max() > 0.3  # a draw, not the cut
    one = wm.propose_next(z_next, c, a, prev, generator=torch.Generator().manual_seed(3))
    assert torch.equal(one, wm.propose_next(z_next, c, a, prev, generator=torch.Generator().manual_seed(3)))
    assert torch.equal(
        wm.propose_next(z_next, c, a, prev), (logits > wm.next_proposal_threshold) | _fallback(wm, z_next, logits)
    )


def _fallback(wm, z_next, logits):
    """Rows the cut leaves empty get the state proposal (then the whole vocabulary)."""
    cut = logits > wm.next_proposal_threshold
    out = torch.zeros_like(cut)
    empty = ~cut.any(-1)
    if empty.any():
        out[empty] = wm.propose(z_next[empty])
        out[empty & ~out.any(-1)] = True
    return out
