"""Simulated rollouts: action distributions match the real policies, determinism per seed, readers, and
the RolloutEvaluator callback inside a one-epoch fit."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from adwm.cli import main
from adwm.config import load_config
from adwm.data.datamodule import TrajectoryDataModule
from adwm.evaluation.bootstrap import mean_interval
from adwm.evaluation.family import family_policies
from adwm.guidance.config import GuidanceConfig
from adwm.models.world_model import WorldModelModule
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.llm import LLMPolicy
from adwm.policies.sampling import action_log_probs, uses_model
from adwm.runtime import costs
from adwm.simulation.choices import next_candidates
from adwm.simulation.config import CANDIDATE_RULES, DiffusionConfig, SimulateConfig
from adwm.simulation.readers import NearestTextReader
from adwm.simulation.simulate import simulate
from adwm.simulation.starts import attach_logged_worlds, logged_reward_range, logged_starts
from helpers import uniform_log_world_model


@pytest.mark.parametrize("temperature,eps", [(1.0, 0.0), (0.5, 0.3), (0.0, 0.0), (0.0, 0.25), (2.0, 1.0)])
def test_action_log_probs_match_the_real_policy(bc_agent_dir, temperature, eps):
    cfg = PolicyConfig(name="p", model=bc_agent_dir, history_turns=0, temperature=temperature, eps=eps)
    state = AgentState(
        "Put the apple in the box.",
        "You are in the kitchen. You carry nothing.",
        [],
        ["look", "inventory", "go to the hallway"],
    )
    real = build_policy(cfg).log_distributions([state])[0]  # numpy path used in the real environment
    scores = torch.as_tensor(LLMPolicy(cfg).action_scores([state])[0])
    np.testing.assert_allclose(action_log_probs(scores, cfg).numpy(), real, rtol=1e-9, atol=1e-9)


def test_bootstrap_ci_brackets_the_mean():
    r = np.random.default_rng(0).normal(0.3, 0.1, size=400)
    lo, hi = mean_interval(r, 2000, 0.95, 0)
    se = r.std(ddof=1) / np.sqrt(len(r))
    assert lo < r.mean() < hi and hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    dm, wm = uniform_log_world_model(tmp_path_factory.mktemp("sim"), 20, 8, 0.2, 3)
    texts, adm = dm.admissible_states("train")
    wm.eval().build_proposal_bank(texts, adm)
    attach_logged_worlds(wm, dm)  # as adwm evaluate does (evaluate.diffusion.snap_world)
    return wm, dm


def test_the_text_reader_scores_the_logged_text_of_the_state_a_latent_snaps_to(world, bc_agent_dir):
    """The default reader: the agent scores candidates on the logged observation whose latent is nearest, the
    same scores as the agent reading that observation itself."""
    wm, _ = world
    bank = wm.proposal_bank
    agent = LLMPolicy(PolicyConfig(name="p", model=bc_agent_dir, history_turns=0))
    rows = [0, 3, len(bank.texts) - 1]
    z = bank.latents[rows] + 1e-4  # a sample a hair away from the logged state snaps to it
    tasks = ["Put the apple in the box."] * 3
    candidates = [["look", "inventory"], ["look", "go to the hallway", "inventory"], ["look"]]
    scores = NearestTextReader(wm, agent).scores(z, tasks, candidates)
    states = [AgentState(t, bank.texts[i], [], c) for t, i, c in zip(tasks, rows, candidates)]
    for got, want in zip(scores, agent.action_scores(states)):
        np.testing.assert_allclose(got.numpy(), np.asarray(want, dtype=np.float32), rtol=1e-6)


def test_the_text_readers_of_one_checkpoint_share_their_scores_and_a_new_action_is_scored_alone(world, bc_agent_dir):
    """Scores depend on the checkpoint, the prompt, the task, the logged text and the action: a reader of the
    same agent at another temperature and eps reads the shared cache (no forward pass, the same scores);
    an action not scored yet costs one state; another prompt has its own entries."""
    wm, _ = world
    bank = wm.proposal_bank
    z = bank.latents[[0, 3]] + 1e-4
    tasks = ["Put the apple in the box."] * 2
    cache: dict = {}
    first = PolicyConfig(name="a", model=bc_agent_dir, history_turns=0)
    other = PolicyConfig(name="b", model=bc_agent_dir, history_turns=0, temperature=2.0, eps=0.5)
    reworded = PolicyConfig(
        name="c", model=bc_agent_dir, history_turns=0, prompt_template="Goal: {task}\n{observation}\n>"
    )

    def read(pcfg, candidates):
        with costs.recording() as record:
            got = NearestTextReader(wm, LLMPolicy(pcfg), cache).scores(z, tasks, candidates)
        return got, record.counts.get("agent/states_read", 0)

    want, n = read(first, [["look", "inventory"], ["look"]])
    assert n == 2
    again, n = read(other, [["inventory", "look"], ["look"]])
    assert n == 0
    np.testing.assert_array_equal(again[0].numpy(), want[0].numpy()[::-1])
    np.testing.assert_array_equal(again[1].numpy(), want[1].numpy())
    more, n = read(other, [["look", "inventory"], ["look", "go to the hallway"]])
    assert n == 1
    alone = LLMPolicy(first).action_scores([AgentState(tasks[1], bank.texts[3], [], ["go to the hallway"])])[0]
    np.testing.assert_allclose(more[1].numpy()[1], np.float32(alone[0]), rtol=1e-5)
    _, n = read(reworded, [["look", "inventory"], ["look"]])
    assert n == 2


def test_simulation_is_deterministic_for_a_seed_and_reads_text(world, bc_agent_dir):
    wm, dm = world
    starts = logged_starts(dm)
    assert starts and all(s.admissible for s in starts)
    pcfg = PolicyConfig(name="p", model=bc_agent_dir, history_turns=0, eps=0.25)
    reader = NearestTextReader(wm, LLMPolicy(pcfg))
    sim = SimulateConfig(n_rollouts=6, batch_size=4)
    guidance = GuidanceConfig(omega=1.5, eta=0.0)
    runs = [simulate(wm, pcfg, reader, starts, sim, guidance, 0.95, 4, seed) for seed in (3, 3, 4)]
    assert runs[0].shape == (6,) and np.all(np.isfinite(runs[0]))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])
    uniform = simulate(wm, PolicyConfig(name="u", kind="uniform"), None, starts, sim, guidance, 0.95, 4, 3)
    assert uniform.shape == (6,)


def test_simulation_names_the_missing_logged_worlds_of_a_bank_that_was_not_told_them(world):
    wm, dm = world
    bare = copy.copy(wm.proposal_bank)  # the fixture's bank, without its worlds
    bare.world_states = None
    wm_bare = copy.copy(wm)
    wm_bare.proposal_bank = bare
    pcfg = PolicyConfig(name="u", kind="uniform")
    args = (None, logged_starts(dm))
    with pytest.raises(RuntimeError, match=r"snap_world=state: .*attach_logged_worlds.*snap_world=none"):
        simulate(wm_bare, pcfg, *args, SimulateConfig(n_rollouts=2, batch_size=2), GuidanceConfig(), 0.95, 2, 0)
    alike = DiffusionConfig(snap_world="none", snap_by_transition=False)
    two = SimulateConfig(n_rollouts=2, batch_size=2)
    assert simulate(wm_bare, pcfg, *args, two, GuidanceConfig(), 0.95, 2, 0, world=alike).shape == (2,)


def test_rollout_evaluator_runs_inside_a_one_epoch_fit(smoke_overrides, tmp_path, bc_agent_dir):
    family = [
        f"policy.model={bc_agent_dir}",
        "family.eps=[0.0,1.0]",
        "family.off_path=[]",
        "ground_truth.n_episodes=4",
    ]
    uniform = ["collect.behaviour=[{policy: {name: u, kind: uniform}, weight: 1.0}]", "collect.n_episodes=10"]
    assert main(["collect", *smoke_overrides, *uniform]) == 0
    assert main(["ground-truth", *smoke_overrides, *family]) == 0
    assert main(["fit", *smoke_overrides, *family, "fit.rollout_eval=true", "fit.rollout_n=4"]) == 0
    metrics = json.loads((tmp_path / "fit" / "metrics.json").read_text())["metrics"]
    keys = {"rollout/J_hat/iter3_eps0", "rollout/J_hat/iter3_eps1", "rollout/spearman", "rollout/nrmse"}
    assert keys <= set(metrics)
    table = json.loads((tmp_path / "fit" / "rollouts_epoch0.json").read_text())
    assert set(table["J_hat"]) == {"iter3_eps0", "iter3_eps1"} and set(table["J"]) == set(table["J_hat"])
    # the final estimate is of the finished world model: the saved checkpoint, heads refitted, gives it again
    final = json.loads((tmp_path / "fit" / "rollouts_final.json").read_text())
    assert metrics["rollout/J_hat/iter3_eps0"] == pytest.approx(final["J_hat"]["iter3_eps0"])
    cfg = load_config([*smoke_overrides, *family, "fit.rollout_n=4"], "fit")
    wm = WorldModelModule.load_from_checkpoint(tmp_path / "fit" / "checkpoints" / "last.ckpt", map_location="cpu")
    dm = TrajectoryDataModule(OmegaConf.to_object(cfg.data), cfg.seed)
    dm.setup()
    attach_logged_worlds(wm, dm)  # as the callback does (evaluate.diffusion.snap_world)
    for pcfg in family_policies(OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.family)):
        reader = NearestTextReader(wm.eval(), LLMPolicy(pcfg)) if uses_model(pcfg) else None
        sim = dataclasses.replace(OmegaConf.to_object(cfg.evaluate.simulate), n_rollouts=4)
        returns = simulate(
            wm,
            pcfg,
            reader,
            logged_starts(dm),
            sim,
            GuidanceConfig(eta=0.0),
            cfg.env.gamma,
            sim.horizon or cfg.env.max_steps,
            cfg.seed,
            reward_range=logged_reward_range(dm),
        )
        assert final["J_hat"][pcfg.name] == pytest.approx(float(np.mean(returns)))


def test_continuation_guidance_runs_and_moves_the_rollouts(world, bc_agent_dir):
    from adwm.guidance.config import TailConfig
    from adwm.guidance.continuation import Continuation, fit_tail_value

    wm, dm = world
    starts = logged_starts(dm)
    pcfg = PolicyConfig(name="p", model=bc_agent_dir, history_turns=0)
    agent = LLMPolicy(pcfg)
    tail = fit_tail_value(wm, pcfg, agent, dm, TailConfig(transitions=40, steps=30), 0)
    assert torch.isfinite(tail(wm.encode(dm.observations[:3]))).all()
    reader = NearestTextReader(wm, agent)
    sim = SimulateConfig(n_rollouts=6, batch_size=6)
    plain = simulate(wm, pcfg, reader, starts, sim, GuidanceConfig(eta=0.0, steps=2), 0.95, 3, 0)
    guided = simulate(
        wm,
        pcfg,
        reader,
        starts,
        sim,
        GuidanceConfig(eta=50.0, steps=2, clip=10.0),
        0.95,
        3,
        0,
        Continuation(wm, reader, tail),
    )
    assert np.all(np.isfinite(guided)) and not np.allclose(plain, guided)


def test_snapping_keeps_every_simulated_latent_on_a_logged_one(world):
    """Snapping is the default: every latent the heads score is a logged one; off, sampled latents are not."""
    wm, dm = world
    seen = []
    transition = wm.heads.transition

    def recorded(z, c, a):
        seen.append(z.flatten(1))
        return transition(z, c, a)

    def run(own):
        uniform, sim = PolicyConfig(name="u", kind="uniform"), SimulateConfig(n_rollouts=4, batch_size=4)
        simulate(wm, uniform, None, logged_starts(dm), sim, GuidanceConfig(), 0.95, 3, 0, world=own)

    wm.heads.transition = recorded
    try:
        run(DiffusionConfig())  # the default
        snapped = list(seen)
        seen.clear()
        run(DiffusionConfig(snap=False))
    finally:
        wm.heads.transition = transition
    bank = wm.proposal_bank.latents

    def on_bank(z):
        return (z[:, None, :] == bank[None]).all(-1).any(-1)

    assert snapped and seen
    for z in snapped:  # each simulated latent is an exact copy of a logged one
        assert on_bank(z).all()
    assert not any(on_bank(z).any() for z in seen)


def test_snapping_within_the_world_keeps_each_rollout_on_its_own_worlds_states(world):
    """With `snap_world` every snapped state of a rollout started in a logged training world was seen in
    that world (this bank has no arrivals, so the world alone decides); off, rollouts leave their worlds."""
    wm, dm = world
    bank = wm.proposal_bank
    from adwm.simulation.starts import attach_logged_worlds

    attach_logged_worlds(wm, dm)
    members = [set(ws) for ws in dm.state_worlds(bank.texts)]
    calls: dict[bool, list] = {True: [], False: []}
    snap = bank.snap
    starts = logged_starts(dm)
    uniform = PolicyConfig(name="u", kind="uniform")
    for on in (True, False):

        def recorded(z, actions=None, worlds=None, stay_in_world=False, moves=None, on=on):
            out = snap(z, actions, worlds, stay_in_world, moves)
            calls[on].append((worlds, out[1]))
            return out

        bank.snap = recorded
        try:
            sim, own = (
                SimulateConfig(n_rollouts=16, batch_size=16),
                DiffusionConfig(snap_world="outcome" if on else "none"),
            )
            simulate(wm, uniform, None, starts, sim, GuidanceConfig(), 0.95, 4, 0, world=own)
        finally:
            del bank.snap
    picked = [starts[i].world for i in np.random.default_rng(0).integers(0, len(starts), size=16)]
    seen_worlds = {w for ws in members for w in ws}
    assert calls[True] and all(w is None for w, _ in calls[False])
    for worlds, index in calls[True]:
        assert worlds.tolist() == picked
        for w, i in zip(worlds.tolist(), index.tolist()):
            assert w in members[i] or w not in seen_worlds  # a validation world has no bank state
    left = sum(w not in members[i] for _, index in calls[False] for w, i in zip(picked, index.tolist()))
    assert left > 0  # the plain snap moves rollouts into other worlds' states


def test_snapping_by_transition_lands_on_a_logged_successor_of_the_rollouts_state_and_action(world):
    """With `snap_by_transition` a rollout in a logged state whose world left it by the chosen action in
    the log lands on what that led to (read off the episodes); each step's state is the last snap's."""
    wm, dm = world
    bank = wm.proposal_bank
    from adwm.simulation.starts import attach_logged_worlds

    attach_logged_worlds(wm, dm)
    world_of = {
        (dm.tasks[x["task"]], dm.observations[x["history_obs"][-1]]): x["world"] for x in dm.train_items if x["t"] == 0
    }
    led: dict[tuple[str, str, int], set[str]] = {}
    for ep in dm.train_episodes:
        w = world_of[(ep.task, ep.steps[0].observation)]
        for step, nxt in zip(ep.steps, [s.observation for s in ep.steps[1:]] + [ep.final_observation]):
            if nxt in bank.texts:
                led.setdefault((step.observation, step.action, w), set()).add(nxt)
    calls = []
    snap = bank.snap

    def recorded(z, actions=None, worlds=None, stay_in_world=False, moves=None):
        out = snap(z, actions, worlds, stay_in_world, moves)
        calls.append((moves, worlds, out[1]))
        return out

    bank.snap = recorded
    uniform = PolicyConfig(name="u", kind="uniform")
    starts = logged_starts(dm)
    try:
        sim, own = SimulateConfig(n_rollouts=32, batch_size=32), DiffusionConfig(snap_by_transition=True)
        simulate(wm, uniform, None, starts, sim, GuidanceConfig(), 0.95, 6, 0, world=own)
    finally:
        del bank.snap
    picked = [starts[i] for i in np.random.default_rng(0).integers(0, len(starts), size=32)]
    first = calls[0][0][0]
    assert first.tolist() == bank.index_of([s.observation for s in picked]).tolist()
    kept = 0
    for (moves, worlds, index), after in zip(calls, [c[0][0] for c in calls[1:]] + [None]):
        states, actions = moves
        for i, a, w, j in zip(states.tolist(), actions.tolist(), worlds.tolist(), index.tolist()):
            outcomes = led.get((bank.texts[i], wm.actions[a], w)) if i >= 0 else None
            if outcomes:
                kept += 1
                assert bank.texts[j] in outcomes
        if after is not None:
            assert after.tolist() == index.tolist()
    assert kept > 10


def test_logged_rewards_pay_what_the_log_paid_for_a_transition_of_the_rollouts_world(world, monkeypatch):
    """With `logged_rewards` a step whose snap followed a transition its world logged pays that transition's
    mean logged reward (read off the episodes); every other step pays the reward head's."""
    import adwm.simulation.simulate as sim_module

    wm, dm = world
    bank = wm.proposal_bank
    attach_logged_worlds(wm, dm)
    world_of = {
        (dm.tasks[x["task"]], dm.observations[x["history_obs"][-1]]): x["world"] for x in dm.train_items if x["t"] == 0
    }
    paid: dict[tuple[str, str, str, int], list[float]] = {}
    for ep in dm.train_episodes:
        w = world_of[(ep.task, ep.steps[0].observation)]
        for step, nxt in zip(ep.steps, [s.observation for s in ep.steps[1:]] + [ep.final_observation]):
            paid.setdefault((step.observation, step.action, nxt, w), []).append(step.reward)
    head_reward = 7.0  # no logged reward is 7
    monkeypatch.setattr(
        wm.heads, "transition", lambda z, c, a: (torch.full((z.size(0),), head_reward), torch.zeros(z.size(0)))
    )
    steps = []
    plain = sim_module._transition

    def recorded(wm, z_raw, c, a, ids, worlds, state, gen, cfg, reward_range):
        out = plain(wm, z_raw, c, a, ids, worlds, state, gen, cfg, reward_range)
        steps.append((state.clone(), ids.clone(), worlds.clone(), out[3].clone(), out[1].clone()))
        return out

    monkeypatch.setattr(sim_module, "_transition", recorded)
    sim, own = SimulateConfig(n_rollouts=32, batch_size=32), DiffusionConfig(logged_rewards=True, clip_rewards=False)
    uniform = PolicyConfig(name="u", kind="uniform")
    simulate(wm, uniform, None, logged_starts(dm), sim, GuidanceConfig(), 0.95, 6, 0, world=own)
    logged = 0
    for state, ids, worlds, index, reward in steps:
        for i, a, w, j, r in zip(state.tolist(), ids.tolist(), worlds.tolist(), index.tolist(), reward.tolist()):
            key = (bank.texts[i], wm.actions[a], bank.texts[j], w) if i >= 0 else None
            if key in paid:
                logged += 1
                assert r == pytest.approx(np.mean(paid[key]))
            else:
                assert r == head_reward
    assert logged > 10


def test_an_action_pays_once_a_rollout_with_pay_once():
    from adwm.simulation.simulate import _paid_once

    paid = torch.zeros(4, 5, dtype=torch.bool)
    paid[0, 1] = True  # rollout 0's action 1 paid before
    out = _paid_once(torch.tensor([0.5, 0.2, 0.0, 0.3]), torch.tensor([1, 2, 3, -1]), paid)
    assert out.tolist() == pytest.approx([0.0, 0.2, 0.0, 0.3])  # an action outside the vocabulary is not tracked
    assert paid.nonzero().tolist() == [[0, 1], [1, 2]]  # a step that paid nothing does not count
    again = _paid_once(torch.tensor([0.1, 0.4, 0.7, 0.3]), torch.tensor([4, 2, 3, -1]), paid)
    assert again.tolist() == pytest.approx([0.1, 0.0, 0.7, 0.3])


def test_first_steps_without_a_list_get_proposed_candidates_and_sets_are_capped(world):
    """A first step logged without its list (on-demand lists) starts from the world model's proposals; a
    large logged first list is cut to the `max_candidates` actions the proposal head scores highest."""
    wm, dm = world
    starts = logged_starts(dm)
    seen = []
    propose_next = wm.propose_next

    def recorded(z_next, c, a, prev, max_candidates=0, generator=None):
        seen.append(prev.clone())
        return propose_next(z_next, c, a, prev, max_candidates, generator)

    wm.propose_next = recorded
    try:
        bare = [dataclasses.replace(s, admissible=None) for s in starts]
        sim, own = SimulateConfig(n_rollouts=4, batch_size=4), DiffusionConfig(candidates="sample")
        uniform = PolicyConfig(name="u", kind="uniform")
        out = simulate(wm, uniform, None, bare, sim, GuidanceConfig(eta=0.0), 0.95, 2, 0, world=own)
        assert np.all(np.isfinite(out)) and seen and bool(seen[0].any(-1).all())
        # a start whose list is the whole vocabulary, capped at 3 by the proposal head's scores
        everything = [dataclasses.replace(s, admissible=list(range(len(wm.actions)))) for s in starts]
        seen.clear()
        own = DiffusionConfig(max_candidates=3, candidates="sample")
        simulate(wm, uniform, None, everything, sim, GuidanceConfig(eta=0.0), 0.95, 2, 0, world=own)
    finally:
        wm.propose_next = propose_next
    assert (seen[0].sum(-1) == 3).all()
    rng = np.random.default_rng(0)
    z = wm.encode([everything[i].observation for i in rng.integers(0, len(everything), 4)])
    with torch.no_grad():
        logits = wm.heads.proposal_logits(z, wm.vocab_embeddings())
    capped = wm.cap_candidates(z, torch.ones(4, len(wm.actions), dtype=torch.bool), 3)
    for row, lg in zip(capped, logits):
        assert set(torch.nonzero(row).flatten().tolist()) == set(lg.topk(3).indices.tolist())


def test_tail_value_of_a_writing_agent_uses_the_probability_of_writing_the_logged_action(world, bc_agent_dir):
    from adwm.guidance.config import TailConfig
    from adwm.guidance.continuation import _writing_log_probs, fit_tail_value

    wm, dm = world
    pcfg = PolicyConfig(name="w", model=bc_agent_dir, mode="generate", eps=0.2, history_turns=0, max_new_tokens=8)
    agent = LLMPolicy(pcfg)
    items = [x for x in dm.train_items if x["admissible"]][:12]
    states = [
        AgentState(
            dm.tasks[x["task"]], dm.observations[x["history_obs"][-1]], [], [dm.actions[a] for a in x["admissible"]]
        )
        for x in items
    ]
    actions = [dm.actions[x["action"]] for x in items]
    live = np.maximum(build_policy(pcfg).log_probs(states, actions), np.log(1e-6))  # eps mixture, one by one
    np.testing.assert_allclose(_writing_log_probs(agent, pcfg, states, actions), live, atol=1e-4)
    value = fit_tail_value(wm, pcfg, agent, dm, TailConfig(transitions=16, steps=5), seed=0)
    assert torch.isfinite(value(wm.encode([dm.observations[0]]))).all()


def test_simulated_rewards_are_clipped_to_the_logged_range(world):
    wm, dm = world
    rewards = np.array([x["reward"] for x in dm.train_items])
    lo, hi = logged_reward_range(dm)
    assert (lo, hi) == (rewards.min(), rewards.max()) and lo == 0.0 and hi > 0
    head = wm.heads.reward[-1]
    saved = head.weight.detach().clone(), head.bias.detach().clone()
    with torch.no_grad():  # a head that pays -1 on every transition, below anything logged
        head.weight.zero_()
        head.bias.fill_(-1.0)
    try:
        uniform, sim = PolicyConfig(name="u", kind="uniform"), SimulateConfig(n_rollouts=4, batch_size=4)
        guidance, starts = GuidanceConfig(eta=0.0), logged_starts(dm)
        raw = simulate(wm, uniform, None, starts, sim, guidance, 0.5, 3, 0, reward_range=(lo, hi))
        unclipped = DiffusionConfig(clip_rewards=False)
        assert np.all(raw == 0.0)
        off = simulate(wm, uniform, None, starts, sim, guidance, 0.5, 3, 0, reward_range=(lo, hi), world=unclipped)
        assert np.all(off < -0.99)  # at least the first step's -1 (termination may end a rollout)
    finally:
        with torch.no_grad():
            head.weight.copy_(saved[0])
            head.bias.copy_(saved[1])


def test_unknown_candidate_rule_is_a_named_error(world):
    wm, dm = world
    with pytest.raises(
        ValueError, match=r"evaluate.diffusion.candidates: unknown rule 'oracle'.*retrieval.*sample.*threshold"
    ):
        DiffusionConfig(candidates="oracle")


def test_every_candidate_rule_gives_finite_reproducible_returns(world):
    """`sample` hands the rollout's generator to the edit head (a draw), `threshold` none (the cut),
    `retrieval` does not call the edit head."""
    wm, dm = world
    uniform, starts = PolicyConfig(name="u", kind="uniform"), logged_starts(dm)
    propose_next = wm.propose_next
    generators = []

    def recorded(z_next, c, a, prev, max_candidates=0, generator=None):
        generators.append(generator)
        return propose_next(z_next, c, a, prev, max_candidates, generator)

    wm.propose_next = recorded
    head = wm.heads.termination[-1]
    saved = head.weight.detach().clone(), head.bias.detach().clone()
    with torch.no_grad():  # rollouts that never end: every step proposes the next set
        head.weight.zero_()
        head.bias.fill_(-30.0)
    try:
        for rule in CANDIDATE_RULES:
            generators.clear()
            sim, own = SimulateConfig(n_rollouts=6, batch_size=6), DiffusionConfig(candidates=rule)
            a = simulate(wm, uniform, None, starts, sim, GuidanceConfig(eta=0.0), 0.9, 3, 1, world=own)
            b = simulate(wm, uniform, None, starts, sim, GuidanceConfig(eta=0.0), 0.9, 3, 1, world=own)
            assert np.all(np.isfinite(a)) and np.array_equal(a, b)
            # two runs of three steps, a proposal after each
            assert len(generators) == (0 if rule == "retrieval" else 2 * 3)
            assert all((g is not None) == (rule == "sample") for g in generators)
    finally:
        wm.propose_next = propose_next
        with torch.no_grad():
            head.weight.copy_(saved[0])
            head.bias.copy_(saved[1])


def test_retrieval_candidates_are_the_list_of_the_nearest_logged_state(world):
    """The next set under `retrieval` is the logged admissible list of the logged state whose encoded latent
    is nearest (numpy argmin over the re-encoded logged texts), capped like every set; no bank: named error."""
    wm, dm = world
    texts, adm = dm.admissible_states("train")
    bank = wm.encode(texts).flatten(1).numpy()
    gen = torch.Generator().manual_seed(5)
    rows = torch.randint(0, len(texts), (6,), generator=gen)
    z_next = wm.encode([texts[i] for i in rows.tolist()])
    z_next = z_next + 0.01 * torch.randn(z_next.shape, generator=gen)
    nearest = ((bank[None] - z_next.flatten(1).numpy()[:, None]) ** 2).sum(-1).argmin(1)
    dummy = torch.zeros(6, 1)
    sets = next_candidates(wm, z_next, dummy, dummy, None, 0, "retrieval")
    for row, i in zip(sets, nearest):
        assert set(torch.nonzero(row).flatten().tolist()) == set(adm[i])
    capped = next_candidates(wm, z_next, dummy, dummy, None, 1, "retrieval")
    assert (capped.sum(-1) == 1).all() and not (capped & ~sets).any()
    bank_saved, wm.proposal_bank = wm.proposal_bank, None
    try:
        sim = SimulateConfig(n_rollouts=2, batch_size=2)  # the default candidates: retrieval
        with pytest.raises(RuntimeError, match="evaluate.diffusion.candidates=retrieval: the world model has no bank"):
            simulate(
                wm, PolicyConfig(name="u", kind="uniform"), None, logged_starts(dm), sim, GuidanceConfig(), 0.9, 2, 0
            )
    finally:
        wm.proposal_bank = bank_saved


def test_resampling_guidance_scores_every_particle_and_is_reproducible(world, bc_agent_dir):
    from adwm.guidance.continuation import Continuation

    wm, dm = world
    starts = logged_starts(dm)
    pcfg = PolicyConfig(name="p", model=bc_agent_dir, history_turns=0)
    reader = NearestTextReader(wm, LLMPolicy(pcfg))
    seen: list[int] = []

    class Recording(Continuation):
        def log_c(self, context_after, next_sets, tasks, policy_cfg, live=None):
            fn = super().log_c(context_after, next_sets, tasks, policy_cfg, live)
            seen.append(len(tasks))
            return fn

    sim = SimulateConfig(n_rollouts=6, batch_size=6)
    resample = GuidanceConfig(eta=5.0, method="resample", particles=3)
    runs = [
        simulate(wm, pcfg, reader, starts, sim, resample, 0.95, 3, seed, Recording(wm, reader, None)) for seed in (0, 0)
    ]
    assert seen and all(n == 6 * 3 for n in seen)  # each rollout's 3 particles are scored, in one batch
    assert np.all(np.isfinite(runs[0])) and np.array_equal(runs[0], runs[1])


def test_a_recorded_simulation_names_its_parts_and_counts_the_agent_reads(world, bc_agent_dir):
    from adwm.runtime import costs

    wm, dm = world
    pcfg = PolicyConfig(name="p", model=bc_agent_dir, history_turns=0)
    reader = NearestTextReader(wm, LLMPolicy(pcfg))
    sim = SimulateConfig(n_rollouts=5, batch_size=5)
    with costs.recording() as record:
        returns = simulate(wm, pcfg, reader, logged_starts(dm), sim, GuidanceConfig(eta=0.0), 0.95, 3, 0)
    assert {"simulate/start", "simulate/history", "simulate/choose", "simulate/denoise", "simulate/heads"} <= set(
        record.seconds
    )
    steps = record.counts["simulate/steps"]
    assert 1 <= steps <= 3 and record.counts["simulate/rollout_steps"] >= 5
    # the agent reads every live rollout's state once a step to choose, and nowhere else without guidance
    assert record.counts["agent/states_read@simulate/choose"] == record.counts["simulate/rollout_steps"]
    assert record.counts["agent/states_read"] == record.counts["simulate/rollout_steps"]
    assert returns.shape == (5,)


def test_the_eps_coin_drawn_first_gives_the_mixture_and_skips_the_agent_on_its_share():
    from types import SimpleNamespace

    from adwm.simulation.choices import chosen_actions

    class CountingReader:  # fixed scores over each state's candidates; counts the states it reads
        read = 0

        def scores(self, z, tasks, candidates):
            self.read += len(candidates)
            return [torch.tensor([2.0, 0.0, -1.0][: len(c)]) for c in candidates]

    wm = SimpleNamespace(actions=["a", "b", "c", "d"])
    n = 20000
    cand = torch.zeros(n, 4, dtype=torch.bool)
    cand[:, :3] = True
    reader, gen = CountingReader(), torch.Generator().manual_seed(0)
    policy = PolicyConfig(name="p", model="m", eps=0.4, temperature=1.0)
    picks = chosen_actions(wm, policy, reader, torch.zeros(n, 1, 1), ["t"] * n, cand, list(range(n)), gen)
    freq = torch.bincount(picks, minlength=4).double() / n
    expected = action_log_probs(torch.tensor([2.0, 0.0, -1.0]), policy).exp()  # the one sampling rule
    assert torch.allclose(freq[:3], expected, atol=0.012) and freq[3] == 0
    assert abs(reader.read / n - 0.6) < 0.015  # the agent read only the states whose coin chose it
    greedy = CountingReader()
    chosen_actions(
        wm,
        dataclasses.replace(policy, eps=0.0),
        greedy,
        torch.zeros(50, 1, 1),
        ["t"] * 50,
        cand[:50],
        list(range(50)),
        gen,
    )
    assert greedy.read == 50


def test_sampler_steps_of_a_simulation_replace_the_world_models_own(world):
    from adwm.simulation.simulate import simulation_sampler

    wm, dm = world
    own = wm.sampler.cfg
    assert simulation_sampler(wm, 0) is wm.sampler and simulation_sampler(wm, own.steps) is wm.sampler
    fewer = simulation_sampler(wm, 2)
    assert len(fewer.timesteps) == 2 and int(fewer.timesteps[-1]) == 0 and fewer.cfg.train_steps == own.train_steps
    with pytest.raises(ValueError, match="evaluate.diffusion.sampler_steps"):
        simulation_sampler(wm, own.train_steps + 1)
    uniform = PolicyConfig(name="u", kind="uniform")
    runs = [
        simulate(
            wm,
            uniform,
            None,
            logged_starts(dm),
            SimulateConfig(n_rollouts=6),
            GuidanceConfig(eta=0.0),
            0.95,
            4,
            0,
            world=DiffusionConfig(sampler_steps=k),
        )
        for k in (0, 2, 2)
    ]
    np.testing.assert_array_equal(runs[1], runs[2])
    assert np.all(np.isfinite(runs[1]))
    with pytest.raises(ValueError, match="evaluate.diffusion.sampler_steps"):
        DiffusionConfig(sampler_steps=-1)


def test_a_writing_agent_writes_in_a_log_with_lists_and_its_random_share_draws_from_the_nearest_list(
    world, bc_agent_dir
):
    """`evaluate.diffusion.agents_write` (the default): a generate-mode agent writes its action (the action
    encoder embeds the text) rather than picking among the capped candidates; its eps share draws uniformly
    from the logged list of the nearest logged state. Off, it picks among the candidates."""
    from adwm.simulation.choices import written_actions

    wm, dm = world
    pcfg = PolicyConfig(name="w", model=bc_agent_dir, mode="generate", history_turns=0, max_new_tokens=8)
    reader = NearestTextReader(wm, LLMPolicy(pcfg))
    embedded: list[str] = []
    real = wm.embed_actions
    wm.embed_actions = lambda texts: embedded.extend(texts) or real(texts)
    try:
        sim = SimulateConfig(n_rollouts=6, batch_size=6)
        with costs.recording() as record:
            simulate(wm, pcfg, reader, logged_starts(dm), sim, GuidanceConfig(eta=0.0), 0.9, 3, 0)
        assert record.to_dict()["counts"]["writer/states"] > 0 and embedded
        embedded.clear()
        with costs.recording() as record:
            picked = DiffusionConfig(agents_write=False)
            simulate(wm, pcfg, reader, logged_starts(dm), sim, GuidanceConfig(eta=0.0), 0.9, 3, 0, world=picked)
        assert "writer/states" not in record.to_dict()["counts"] and not embedded
    finally:
        wm.embed_actions = real
    bank = wm.proposal_bank
    rows = [i for i in range(len(bank.texts)) if bank.sets[i].sum() > 1][:3]
    z = bank.latents[rows].repeat_interleave(20, 0)
    rngs = [np.random.default_rng(k) for k in range(len(z))]
    drawn = written_actions(wm, dataclasses.replace(pcfg, eps=1.0), None, z, ["t"] * len(z), rngs)
    for k, text in enumerate(drawn):
        listed = {wm.actions[j] for j in torch.nonzero(bank.sets[rows[k // 20]]).flatten().tolist()}
        assert text in listed
    assert len(set(drawn[:20])) > 1


def test_a_reader_that_keeps_texts_reads_the_start_then_what_was_written_after_it(world):
    """With a reader whose world writes each state's text (ablation.reader=decoded), the agent reads the
    logged start first, and each next text is written after the text its rollout read before."""
    wm, dm = world
    starts = logged_starts(dm)

    class WritingReader:  # writes "<text before> +" and records what it was given
        keeps_texts = True
        sources = 2

        def __init__(self):
            self.read, self.before = [], []

        def scores(self, z, tasks, candidates, texts=None):
            self.read.append(list(texts))
            return [torch.zeros(len(c)) for c in candidates]

        def next_texts(self, z_next, tasks, read):
            assert all(0 < len(r) <= 2 for r in read)  # its last texts, oldest first
            self.before.append([r[-1] for r in read])
            return [r[-1] + " +" for r in read]

    reader = WritingReader()
    pcfg = PolicyConfig(name="p", model="m")
    sim = SimulateConfig(n_rollouts=4, batch_size=4)
    simulate(wm, pcfg, reader, starts, sim, GuidanceConfig(eta=0.0), 0.95, 3, 0)
    observations = {s.observation for s in starts}
    assert reader.read and all(t in observations for t in reader.read[0])  # the logged starts, as logged
    for step, (before, read) in enumerate(zip(reader.before, reader.read[1:]), 1):
        assert all(t.endswith(" +" * step) for t in read)  # what was written after the text read before
        assert set(read) <= {t + " +" for t in before}


def test_a_writing_agent_with_a_reader_that_keeps_texts_reads_its_own_rollouts_texts(world):
    """The writing path (no candidate sets) with a text-writing reader: each live rollout's agent reads its own
    rollout's current text, the logged start first, then what was written after it."""
    wm, dm = world
    starts = logged_starts(dm)

    class WritingReader:
        keeps_texts, sources = True, 2

        def __init__(self):
            self.read = []

        def write(self, z, tasks, rngs, texts=None):
            self.read.append(list(texts))
            return [wm.actions[0]] * len(z)

        def next_texts(self, z_next, tasks, read):
            return [r[-1] + " +" for r in read]

    reader = WritingReader()
    pcfg = PolicyConfig(name="w", model="m", mode="generate")
    simulate(wm, pcfg, reader, starts, SimulateConfig(n_rollouts=4, batch_size=4), GuidanceConfig(eta=0.0), 0.95, 3, 0)
    observations = {s.observation for s in starts}
    assert len(reader.read) > 1 and all(t in observations for t in reader.read[0])
    for step, read in enumerate(reader.read[1:], 1):
        assert all(t.endswith(" +" * step) and t[: -2 * step] in observations for t in read)


def test_with_reencode_the_heads_read_the_encoding_of_the_text_written(world, monkeypatch):
    """evaluate.diffusion.reencode: the state a rollout goes on from is the encoding of the text the reader
    wrote for the sample (so the heads score what the agent read); without it, the sample itself."""
    wm, dm = world
    starts = logged_starts(dm)
    fixed = starts[-1].observation

    class FixedReader:  # writes one logged text whatever the latent
        keeps_texts, sources = True, 1

        def scores(self, z, tasks, candidates, texts=None):
            return [torch.zeros(len(c)) for c in candidates]

        def next_texts(self, z_next, tasks, read):
            return [fixed] * len(z_next)

    seen = []
    heads = wm.heads.transition
    monkeypatch.setattr(wm.heads, "transition", lambda z, c, a: seen.append(z.clone()) or heads(z, c, a))
    pcfg = PolicyConfig(name="p", model="m")
    sim = SimulateConfig(n_rollouts=4, batch_size=4)
    target = wm.encode([fixed])[0]
    for reencode in (True, False):
        seen.clear()
        cfg = DiffusionConfig(snap=False, reencode=reencode)
        simulate(wm, pcfg, FixedReader(), starts, sim, GuidanceConfig(eta=0.0), 0.95, 2, 0, world=cfg)
        close = torch.allclose(seen[0], target.expand_as(seen[0]), atol=1e-5)
        assert close == reencode


def test_starts_in_order_with_their_own_first_action_and_budget(world, monkeypatch):
    """`in_order`: one rollout per start; `Start.steps` caps a rollout's steps (a later logged step) and
    `Start.first` is the action its first transition reads (a return of Q(s, a))."""
    wm, dm = world
    uniform, starts = PolicyConfig(name="u", kind="uniform"), logged_starts(dm)[:5]
    sim, g = SimulateConfig(n_rollouts=99), GuidanceConfig(eta=0.0)
    one_step = simulate(wm, uniform, None, starts, sim, g, 0.9, 1, 3, in_order=True)
    assert one_step.shape == (5,)  # n_rollouts is not read
    capped = [dataclasses.replace(s, steps=1) for s in starts]
    np.testing.assert_array_equal(simulate(wm, uniform, None, capped, sim, g, 0.9, 3, 3, in_order=True), one_step)
    action = wm.actions[1]
    read = []
    transition = wm.heads.transition

    def recorded(z_next, c, a):
        read.append(a.clone())
        return transition(z_next, c, a)

    monkeypatch.setattr(wm.heads, "transition", recorded)
    forced = [dataclasses.replace(s, first=action) for s in starts]
    simulate(wm, uniform, None, forced, sim, g, 0.9, 2, 3, in_order=True)
    vocab = wm.vocab_embeddings()
    torch.testing.assert_close(read[0], vocab[[1] * 5])  # every rollout's first step: the given action
    assert not torch.equal(read[1], vocab[[1] * 5])  # then the agent's own draws
