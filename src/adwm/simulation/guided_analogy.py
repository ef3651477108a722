"""`evaluate.world=guided_analogy`: the learned world model picks each next state among the analogy world's
proposals.

A snap of the learned model's sample to a logged latent keeps its states in the log, which loses the state
in every world the log never showed (decisions.md: a world that keeps the state). The analogy world
(simulation/analogy.py) makes up such states, but where several of the log's edits fit it draws among
them by how often the log made each. Here the two take turns as the learned model and the log do in
`diffusion`:

1. the agent (the real policy, reading the state's text as in the text worlds) picks its action;
2. the analogy world proposes every next state it allows (`AnalogyWorld.proposals`);
3. the learned model samples z_{t+1} from the rollout's history window and the action, with action
   guidance (`guidance.omega`), and the proposal whose encoded text is nearest to the sample is the next
   state (a single proposal is taken as it is); with `evaluate.guided_analogy.temperature` above 0 the
   next state is drawn instead, each proposal weighted by how often the log made it times how near the
   sample lands to it (`pick_probabilities`);
4. the reward and the end are the chosen proposal's (`evaluate.guided_analogy.rewards=edits`, the
   default: what the rollout's own logged world paid and ended for the action in that scene, else the mean
   reward of the logged outcomes that made its text, an end drawn with their share of ends) or the heads'
   on the chosen latent (`heads`, the reward clipped to the logged range as in `diffusion`); the history
   window takes the chosen latent.

Continuation guidance needs the agent's distribution over the next states' candidate sets read from
latents; here the agent reads text, so `guidance.eta` must be 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from adwm.diffusion.sampler import DiffusionSampler
from adwm.guidance import guided_eps_fn
from adwm.guidance.config import GuidanceConfig
from adwm.models.history import Window
from adwm.policies.base import Policy
from adwm.runtime import costs
from adwm.simulation.analogy import AnalogyWorld, Proposal
from adwm.simulation.config import check_proposal_rewards
from adwm.simulation.worlds import LoggedStart, TextState, act_or_given, drawn_starts, keep_logged_turns


def nearest_proposal(sample: torch.Tensor, latents: torch.Tensor) -> int:
    """The index of the latent (K, L, d) nearest (squared Euclidean) to `sample` (L, d)."""
    return int(((latents - sample[None]) ** 2).flatten(1).sum(1).argmin())


def pick_probabilities(sample: torch.Tensor, latents: torch.Tensor, weights: torch.Tensor, temperature: float):
    """The probability of taking each proposal (latents (K, L, d), log frequencies `weights` (K,)) given the
    learned model's `sample` (L, d): proportional to w_k exp(-d_k^2 / (temperature * mean_j d_j^2)), d_k the
    distance of proposal k to the sample. Temperature 0 is the nearest proposal; a large one, the log's
    frequencies (the analogy world's own draw)."""
    if temperature == 0:
        return torch.nn.functional.one_hot(torch.tensor(nearest_proposal(sample, latents)), len(latents)).double()
    d2 = ((latents - sample[None]) ** 2).flatten(1).sum(1).double()
    logits = weights.double().log() - d2 / (temperature * d2.mean().clamp_min(1e-12))
    return torch.softmax(logits, 0)


def pick_proposals(
    wm,
    world: AnalogyWorld,
    states: list[TextState],
    chosen: dict[int, str],
    sample: torch.Tensor,
    z: torch.Tensor,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[dict[int, Proposal], torch.Tensor]:
    """For each row i of `chosen` (row -> action), the proposal of `world` from `states[i]` whose encoded text
    is nearest to `sample[i]`, or at a `temperature` above 0 one drawn by `pick_probabilities` (a single
    proposal is taken as it is) -> (the picks by row, the latents (B, L, d): the picked ones' on those rows,
    `z`'s elsewhere)."""
    options = {i: world.proposals(states[i], a) for i, a in chosen.items()}
    encoded = wm.encode([p.state.observation for i in options for p in options[i]])  # every proposal, one call
    picked: dict[int, Proposal] = {}
    z_next, first = z.clone(), 0
    for i, mine in options.items():
        latents = encoded[first : first + len(mine)]
        if len(mine) == 1:
            k = 0
        else:
            weights = torch.tensor([p.weight for p in mine])
            probs = pick_probabilities(sample[i], latents, weights, temperature)
            k = int(torch.multinomial(probs, 1, generator=generator)) if temperature > 0 else int(probs.argmax())
        picked[i], z_next[i] = mine[k], latents[k]
        first += len(mine)
    return picked, z_next


def move_to(world: AnalogyWorld, states: list[TextState], picked: dict[int, Proposal]) -> None:
    """Each picked row's state becomes its proposal's, the scene it leaves kept by the world for a return."""
    for i, p in picked.items():
        world.remember(states[i], p.state)
        if not p.state.admissible:  # a state the log showed only at an episode's end: the list it had before
            p.state.admissible = states[i].admissible
        states[i] = p.state


def rollout_guided_analogy(
    wm,
    world: AnalogyWorld,
    policy: Policy,
    starts: Sequence[LoggedStart],
    n_rollouts: int,
    horizon: int,
    gamma: float,
    seed: int,
    guidance: GuidanceConfig,
    sampler: DiffusionSampler,
    rewards: str = "edits",
    reward_range: tuple[float, float] | None = None,
    step: Callable[[int], object] = lambda n: None,
    temperature: float = 0.0,
) -> np.ndarray:
    """Discounted returns (n_rollouts,) of `policy` (module docstring), from starts drawn as the text worlds
    draw them; `temperature`: how the next state is picked among the proposals (`pick_probabilities`)."""
    pick, rngs = drawn_starts(len(starts), n_rollouts, seed)
    chosen = [starts[i] for i in pick]
    steps = np.full(n_rollouts, horizon)
    args = (guidance, sampler, rewards, reward_range, step, temperature)
    return guided_rollouts(wm, world, policy, chosen, rngs, steps, None, gamma, seed, *args)


@torch.no_grad()
def guided_rollouts(
    wm,
    world: AnalogyWorld,
    policy: Policy,
    starts: Sequence[LoggedStart],
    rngs: Sequence[np.random.Generator],
    steps: np.ndarray,
    first: Sequence[str | None] | None,
    gamma: float,
    seed: int,
    guidance: GuidanceConfig,
    sampler: DiffusionSampler,
    rewards: str = "edits",
    reward_range: tuple[float, float] | None = None,
    step: Callable[[int], object] = lambda n: None,
    temperature: float = 0.0,
) -> np.ndarray:
    """One rollout per start (module docstring), the k-th of at most `steps[k]` steps and with `first[k]` as
    its first action where given (worlds.run_rollouts); the history window starts at the start's text."""
    check_proposal_rewards(rewards)
    if guidance.eta != 0:
        raise ValueError(
            f"guidance.eta={guidance.eta}: evaluate.world=guided_analogy has no continuation guidance (the agent "
            "reads text, not latents); set guidance.eta=0"
        )
    wm = wm.eval()
    n_rollouts = len(starts)
    gen = torch.Generator().manual_seed(seed)
    with costs.section("simulate/start"):
        states = [world.start(s) for s in starts]
        keep_logged_turns(states, starts)
        z = wm.encode([s.observation for s in states])  # the world model keeps each text's latent once fitted
        window = Window.start(z, wm.encode([s.task for s in states]), wm.hparams.window, wm.cfg.d_action)
    alive = np.ones(n_rollouts, dtype=bool)
    returns = np.zeros(n_rollouts)
    for t in range(int(steps.max(initial=0))):
        live = np.flatnonzero(alive).tolist()
        costs.count("simulate/steps")
        costs.count("simulate/rollout_steps", len(live))
        with costs.section("simulate/choose"):
            chosen = dict(zip(live, act_or_given(policy, states, live, rngs, first if t == 0 else None)))
        with costs.section("simulate/history"):
            c = window.context(wm)
        with costs.section("simulate/denoise"):
            a = wm.embed_actions([chosen.get(i, "") for i in range(n_rollouts)])  # finished rollouts: not read
            eps_fn = guided_eps_fn(lambda x, tt, act, c=c: wm.eps(x, tt, c, act), a, wm.abar, guidance)
            sample = sampler.sample(eps_fn, tuple(z.shape), gen, z.device)
        with costs.section("simulate/propose"):  # the analogy world's proposals, encoded; the nearest taken
            picked, z_next = pick_proposals(wm, world, states, chosen, sample, z, temperature, gen)
        if rewards == "heads":
            with costs.section("simulate/heads"):
                reward, done_logit = wm.heads.transition(z_next, c, a)
            if reward_range is not None:
                reward = reward.clamp(*reward_range)
            done = (torch.rand(n_rollouts, generator=gen) < torch.sigmoid(done_logit).cpu()).numpy()
            reward = reward.double().cpu().numpy()
        else:
            reward, done = np.zeros(n_rollouts), np.zeros(n_rollouts, dtype=bool)
            ends = torch.rand(n_rollouts, generator=gen).numpy()
            for i, p in picked.items():
                reward[i], done[i] = p.reward, ends[i] < p.done  # the mean reward of the logged outcomes, an end drawn
        for i in picked:
            returns[i] += gamma**t * reward[i]
            alive[i] = not done[i] and t + 1 < steps[i]
        with costs.section("simulate/propose"):
            move_to(world, states, picked)
        step(1)
        if not alive.any():
            break
        window = window.shifted(z_next, a)
        z = z_next
    return returns
