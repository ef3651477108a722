"""Simulated rollouts in the learned world model (`evaluate.world=diffusion`): the evaluated agent and the
world model take turns.

Each rollout starts from a logged initial observation (real text, encoded) with
its logged admissible list. Then, batched over rollouts: the agent reads the
latent (the nearest logged text, by default; or soft tokens) and picks among the candidate
actions (eps-greedy and temperature act on that same set) -> guided denoising
gives z_{t+1}, snapped to the nearest logged latent (`snap`; among the logged outcomes of the chosen
action, in the rollout's own world, and of its state by that action where the log has them) -> the reward and
termination heads score the transition -> the next candidate set is the logged
list of the nearest logged state (`candidates`; or the world model's edit head).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from adwm.diffusion.sampler import DiffusionSampler
from adwm.guidance import guided_eps_fn
from adwm.guidance.config import GuidanceConfig
from adwm.guidance.continuation import Continuation
from adwm.guidance.resample import tilted_pick
from adwm.models.history import Window
from adwm.models.proposal_bank import action_ids
from adwm.models.world_model.protocol import WorldModel
from adwm.policies.config import PolicyConfig
from adwm.runtime import costs
from adwm.runtime.progress import bar
from adwm.simulation.choices import chosen_actions, first_candidates, next_candidates, written_actions
from adwm.simulation.config import DiffusionConfig, SimulateConfig
from adwm.simulation.readers import LatentReader
from adwm.simulation.starts import Start


@torch.no_grad()
def simulate(
    world_model: WorldModel,
    policy: PolicyConfig,
    reader: LatentReader | None,
    starts: list[Start],
    cfg: SimulateConfig,
    guidance: GuidanceConfig,
    gamma: float,
    horizon: int,
    seed: int,
    continuation: Continuation | None = None,
    reward_range: tuple[float, float] | None = None,
    world: DiffusionConfig | None = None,
    in_order: bool = False,
) -> np.ndarray:
    """Discounted returns (n_rollouts,) of `policy` simulated in `world_model`, from starts drawn with
    replacement; with `in_order`, one rollout per start in order (`cfg.n_rollouts` is not read).

    `reader` turns latents into candidate scores (None for a uniform policy); `continuation`
    builds log C for guidance (None: continuation guidance off); `reward_range` (the logged rewards'
    `logged_reward_range`) bounds the simulated rewards when `world.clip_rewards`; `world`: the learned
    world's settings (`evaluate.diffusion`; None: the defaults)."""
    sim, cfg = cfg, world or DiffusionConfig()
    if cfg.candidates == "retrieval" and world_model.proposal_bank is None:
        raise RuntimeError(
            "evaluate.diffusion.candidates=retrieval: the world model has no bank of logged states (fit builds it)"
        )
    bank = world_model.proposal_bank
    if cfg.snap and cfg.snap_world != "none" and bank is not None and bank.world_states is None:
        raise RuntimeError(
            f"evaluate.diffusion.snap_world={cfg.snap_world}: the world model's bank was not told which logged "
            "world each of its states belongs to; call simulation.simulate.attach_logged_worlds(world_model, "
            "data_module) first (adwm evaluate does), or set evaluate.diffusion.snap_world=none"
        )
    wm = world_model.eval()
    sampler = simulation_sampler(wm, cfg.sampler_steps)
    gen = torch.Generator().manual_seed(seed)
    if in_order:
        pick = np.arange(len(starts))
    else:
        pick = np.random.default_rng(seed).integers(0, len(starts), size=sim.n_rollouts)
    writes = agent_writes(wm, policy, cfg)
    returns = []
    batches = range(0, len(pick), sim.batch_size)
    with bar(len(batches) * horizon, f"simulate {policy.name}", "step") as shown:
        for lo in batches:
            batch = [starts[i] for i in pick[lo : lo + sim.batch_size]]
            # a free-form log: one generator a rollout, so its written actions do not depend on its batch
            rngs = [np.random.default_rng((seed, lo + i)) for i in range(len(batch))] if writes else None
            args = (wm, sampler, policy, reader, batch, guidance, gamma, horizon, gen, continuation, cfg, reward_range)
            returns.append(_rollout_batch(*args, rngs, shown.update))
            shown.update((lo // sim.batch_size + 1) * horizon - shown.n)  # the steps of rollouts that ended early
    return np.concatenate(returns)


def agent_writes(wm: WorldModel, policy: PolicyConfig, cfg: DiffusionConfig) -> bool:
    """Whether the agent writes its actions in simulation (no candidate sets): always in a free-form log,
    and for a writing agent (`mode: generate`) with `evaluate.diffusion.agents_write`."""
    return wm.free_form or (cfg.agents_write and policy.mode == "generate")


def simulation_sampler(wm: WorldModel, steps: int, key: str = "evaluate.diffusion.sampler_steps") -> DiffusionSampler:
    """The world model's sampler with `steps` reverse steps (the config's `key`; 0: its own)."""
    own = wm.sampler.cfg
    if steps == 0 or steps == own.steps:
        return wm.sampler
    if own.method != "ddim":
        raise ValueError(
            f"{key}={steps}: the world model samples with {own.method}, which takes "
            f"every one of its {own.train_steps} steps; use 0 (its own) or a ddim world model"
        )
    if steps > own.train_steps:
        raise ValueError(
            f"{key}: expected 0..{own.train_steps} (the world model's world_model.sampler.train_steps), got {steps}"
        )
    return DiffusionSampler(replace(own, steps=steps))


def _transition(
    wm, z_next, c, a, ids, worlds, state, gen, cfg: DiffusionConfig, reward_range
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Snap z_{t+1} to the nearest logged latent (`cfg.snap`; among the states the chosen actions `ids` led
    to in the log with `cfg.snap_by_action`, among those seen in each rollout's logged world `worlds`
    with `cfg.snap_world`, where the bank knows the worlds, and among the logged successors of the bank
    states `state` (B,) by those actions with `cfg.snap_by_transition`, where the log has any), then the
    reward (clipped to the logged range) and termination draws of the heads
    (with `cfg.logged_rewards`, a transition the rollout's world logged pays its logged reward)
    -> (z_next, reward, done, the snapped states' bank indices or None without a snap)."""
    index, moves, by_world = None, None, None
    if cfg.snap:
        if wm.proposal_bank is None:
            raise RuntimeError("evaluate.diffusion.snap=true: the world model has no bank of logged latents")
        with costs.section("simulate/retrieval"):
            by_world = worlds if cfg.snap_world != "none" else None
            by_action = ids if cfg.snap_by_action else None
            moves = (state, ids) if cfg.snap_by_transition and state is not None else None
            z_next, index = wm.proposal_bank.snap(z_next, by_action, by_world, cfg.snap_world == "state", moves)
    with costs.section("simulate/heads"):
        reward, done_logit = wm.heads.transition(z_next, c, a)
    if cfg.clip_rewards and reward_range is not None:
        reward = reward.clamp(*reward_range)
    if cfg.logged_rewards and moves is not None and wm.proposal_bank.transitions is not None:
        logged = wm.proposal_bank.logged_rewards(state, ids, index, by_world).to(reward.device)
        reward = torch.where(torch.isnan(logged), reward, logged.to(reward.dtype))
    # returns and the alive mask are kept on the CPU, where the seeded generator draws
    done = torch.rand(z_next.size(0), generator=gen) < torch.sigmoid(done_logit).cpu()
    return z_next, reward.cpu(), done, index


def _rollout_batch(
    wm: WorldModel,
    sampler: DiffusionSampler,
    policy: PolicyConfig,
    reader: LatentReader | None,
    starts: list[Start],
    guidance: GuidanceConfig,
    gamma: float,
    horizon: int,
    gen: torch.Generator,
    continuation: Continuation | None,
    cfg: DiffusionConfig,
    reward_range: tuple[float, float] | None,
    rngs: list[np.random.Generator] | None = None,
    step: Callable[[int], object] = lambda n: None,
) -> np.ndarray:
    """One batch of rollouts. With candidate lists the agent picks among the candidate set of each state;
    in a free-form log (`rngs`: one generator a rollout) it writes its action reading z_t, the action
    encoder embeds what it wrote, and there are no candidate sets: continuation guidance, which needs the
    agent's distribution over the next sets, is off (`estimate_policy` says so)."""
    b = len(starts)
    tasks = [s.task for s in starts]
    worlds = torch.tensor([s.world for s in starts], dtype=torch.long)
    with costs.section("simulate/start"):
        z = wm.encode([s.observation for s in starts])  # (B, L, d)
        # the bank index of each rollout's state (-1: a text the bank does not hold), for snapping by transition
        bank = wm.proposal_bank
        state = bank.index_of([s.observation for s in starts]) if cfg.snap and bank is not None else None
        vocab = wm.vocab_embeddings()
        cand = None if rngs is not None else first_candidates(wm, z, starts, cfg.max_candidates)
        # the task stays in the history for the whole rollout
        window = Window.start(z, wm.encode(tasks), wm.hparams.window, vocab.size(1))
    # a reader whose world model writes each state's text (ablation.reader=decoded) reads the logged start,
    # then what the decoder writes after what the rollout read before: its task and `seen`, the last texts
    # of each rollout (oldest first; the last is the current state's)
    seen = [[s.observation] for s in starts] if getattr(reader, "keeps_texts", False) else None
    alive = torch.ones(b, dtype=torch.bool)
    forced = {i: s.first for i, s in enumerate(starts) if s.first is not None}
    # a start's own budget of steps (a later logged step); the others run to the loop's end as before
    limit = torch.tensor([s.steps or horizon + 1 for s in starts])
    ret = torch.zeros(b, dtype=torch.float64)
    paid = torch.zeros(b, len(wm.actions), dtype=torch.bool) if cfg.pay_once else None  # actions that paid
    guided = {int(t) for t in sampler.timesteps[-guidance.steps :]} if guidance.steps > 0 else set()
    for t in range(horizon):
        costs.count("simulate/steps")
        costs.count("simulate/rollout_steps", int(alive.sum()))
        with costs.section("simulate/history"):
            c = window.context(wm)  # (B, d_c)
        # (1) the agent acts while reading z_t; finished rollouts are not scored
        live = torch.nonzero(alive).flatten().tolist()
        with costs.section("simulate/choose"):
            if cand is None:
                current = None if seen is None else [seen[i][-1] for i in live]
                prompts = [tasks[i] for i in live]
                acts = written_actions(wm, policy, reader, z[live], prompts, [rngs[i] for i in live], current)
                a = torch.zeros(b, vocab.size(1), device=z.device)
                a[live] = wm.embed_actions(acts)
                ids = torch.full((b,), -1, dtype=torch.long)
                ids[live] = action_ids(wm.actions, acts)
            else:
                current = None if seen is None else [r[-1] for r in seen]
                ids = chosen_actions(wm, policy, reader, z, tasks, cand, live, gen, current)  # (B,) vocabulary indices
                a = vocab[ids]  # (B, d_a)
            if t == 0 and forced:  # a start's own first action (a return of Q(s, a))
                rows, texts = list(forced), list(forced.values())
                ids[rows] = known = action_ids(wm.actions, texts)
                a = a.clone()
                a[rows] = torch.where(
                    (known >= 0)[:, None].to(a.device), vocab[known.clamp_min(0)], wm.embed_actions(texts)
                )
        # (2) guided denoising of z_{t+1}: Theorem 1's tilt by importance resampling, or the gradient step
        tilt = continuation is not None and bool(guided) and cand is not None
        if tilt and guidance.method == "resample":
            z_raw = _tilted_next(wm, sampler, policy, window, c, a, cand, tasks, live, continuation, guidance, cfg, gen)
        else:
            log_c = None
            if tilt:

                def context_after(z0, window=window, a=a):
                    return window.shifted(z0, a).context(wm)

                def next_sets(z0, rows, c=c, a=a, cand=cand):  # the rule's cut: no draw inside guidance
                    return next_candidates(wm, z0, c[rows], a[rows], cand[rows], cfg.max_candidates, cfg.candidates)

                log_c = continuation.log_c(context_after, next_sets, tasks, policy, live)
            eps_fn = guided_eps_fn(lambda x, tt, act, c=c: wm.eps(x, tt, c, act), a, wm.abar, guidance, log_c, guided)
            with costs.section("simulate/denoise"):
                z_raw = sampler.sample(eps_fn, tuple(z.shape), gen, z.device)
        # (3) the text of the next state, where the reader keeps texts (the state goes on from its encoding
        # with `cfg.reencode`); snapped; then the reward and termination heads
        written = None
        if seen is not None:
            written = reader.next_texts(z_raw[live], [tasks[i] for i in live], [seen[i] for i in live])
            if cfg.reencode:
                with costs.section("simulate/reencode"):
                    z_raw = z_raw.clone()
                    z_raw[live] = wm.encode(written)
        z_next, reward, done, state = _transition(wm, z_raw, c, a, ids, worlds, state, gen, cfg, reward_range)
        if cfg.pay_once:
            reward = _paid_once(reward, ids, paid)
        ret += alive.double() * gamma**t * reward.double()
        alive &= ~done & (t + 1 < limit)
        step(1)
        if not alive.any():
            break
        # (4) next candidate sets and the shifted history window
        if cand is not None:
            with costs.section("simulate/retrieval"):
                cand = next_candidates(wm, z_next, c, a, cand, cfg.max_candidates, cfg.candidates, gen)
        if written is not None:  # the next texts of the rollouts that go on
            for i, text in zip(live, written):
                if alive[i]:
                    seen[i] = (seen[i] + [text])[-max(1, reader.sources) :]
        window = window.shifted(z_next, a)
        z = z_next
    return ret.numpy()


def _paid_once(reward: torch.Tensor, ids: torch.Tensor, paid: torch.Tensor) -> torch.Tensor:
    """`reward` (B,) with 0 where the row's action (`ids`, -1: outside the vocabulary) already paid a positive
    reward in its rollout; marks the actions that pay now in `paid` (B, V)."""
    rows = torch.nonzero(ids >= 0).flatten()
    out = reward.clone()
    again = paid[rows, ids[rows]]
    out[rows[again]] = 0.0
    paid[rows, ids[rows]] |= out[rows] > 0
    return out


def _tilted_next(
    wm, sampler, policy, window, c, a, cand, tasks, live, continuation, guidance, cfg, gen
) -> torch.Tensor:
    """z_{t+1} from Theorem 1's tilted kernel: `guidance.particles` draws of the omega-guided kernel per
    rollout, in one batch, one kept per rollout with probability proportional to C^eta (guidance/resample.py)."""
    k = guidance.particles
    c_k, a_k, cand_k, window_k = (
        c.repeat_interleave(k, 0),
        a.repeat_interleave(k, 0),
        cand.repeat_interleave(k, 0),
        window.repeat(k),
    )
    eps_fn = guided_eps_fn(lambda x, tt, act: wm.eps(x, tt, c_k, act), a_k, wm.abar, guidance)
    with costs.section("simulate/denoise"):
        particles = sampler.sample(eps_fn, (c.size(0) * k, *window.z.shape[2:]), gen, c.device)

    def next_sets(z0, rows):
        return next_candidates(wm, z0, c_k[rows], a_k[rows], cand_k[rows], cfg.max_candidates, cfg.candidates)

    tasks_k = [t for t in tasks for _ in range(k)]
    live_k = [i * k + j for i in live for j in range(k)]
    log_c = continuation.log_c(lambda z0: window_k.shifted(z0, a_k).context(wm), next_sets, tasks_k, policy, live_k)
    with torch.no_grad(), costs.section("simulate/guidance"):
        return tilted_pick(particles, log_c(particles), k, guidance.eta, gen)
