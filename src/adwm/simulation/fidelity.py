"""Fidelity of a world model: held-out episodes replayed open loop with their logged actions.

For k = 1, 5, 10 steps: the state accuracy, the share of replays whose state after k logged actions (the
nearest logged observation of the sampled latent, what the agent and the heads read after snapping)
agrees with the logged observation k steps in, by the environment's state key (`envs.registry.state_key`:
builtin's room and inventory; the whole text elsewhere). Beside it, on the same replays:
- the log's text worlds, built from the training split: `stay` (the first observation kept), `nearest`
  (the logged successors; simulation/worlds.py) and `analogy` (the log's edits applied by analogy;
  simulation/analogy.py);
- `snap_ceiling`: the state a perfect sample would be snapped to (the true observation encoded and
  snapped), which bounds what the learned model can reach with its bank of logged states, and
  `snap_reachable`, the share of replays for which the bank holds a state of the true key among those the
  snap may land on (what a snap by a better distance could reach);
- `guided_analogy`: the learned model picking each next state among the analogy world's proposals
  (simulation/guided_analogy.py), which is not bound to the logged states.
- `decoded` (closed loop: the model's own samples, no snapping, read through its text decoder) and
  `decoded_teacher` (open loop: o_k sampled from the logged history up to k - 1, decoded), each as state
  accuracy and as `_exact`, the share of replays whose decoded text is exactly the logged observation; what
  the agent reads with `ablation.reader=decoded`.
And over whole episodes: the correlation of the simulated and logged discounted returns (the simulated one
is the expected return under the termination head, sum_t gamma^t r_t prod_{s<t} (1 - p_s)) and the mean
simulated probability of ending within the logged length against the logged share of episodes that ended
(not truncated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from adwm.data.schema import Episode
from adwm.guidance import guided_eps_fn
from adwm.guidance.config import GuidanceConfig
from adwm.models.history import Window
from adwm.models.proposal_bank import action_ids
from adwm.simulation.analogy import AnalogyWorld
from adwm.simulation.guided_analogy import move_to, pick_proposals
from adwm.simulation.worlds import LoggedStart, LoggedWorld

KS = (1, 5, 10)


def _true_observation(ep: Episode, k: int) -> str:
    return ep.final_observation if k == len(ep.steps) else ep.steps[k].observation


@torch.no_grad()
def replay_fidelity(
    wm,
    episodes: Sequence[Episode],
    train_episodes: Sequence[Episode],
    state_key: Callable[[str], object],
    gamma: float,
    seed: int,
    ks: Sequence[int] = KS,
    by_action: bool = True,
) -> dict[str, float]:
    """`fidelity/...` metrics of world model `wm` (a fitted `WorldModelModule` with its bank of logged
    states) on `episodes` (held out), with the controls built from `train_episodes`. `by_action`: the snap
    keeps to the logged states the action led to (evaluate.diffusion.snap_by_action)."""
    if not episodes:
        return {}
    if wm.proposal_bank is None or wm.proposal_bank.texts is None:
        raise RuntimeError("fidelity: the world model has no bank of logged observations (fit builds it)")
    wm = wm.eval()
    gen = torch.Generator().manual_seed(seed)
    b, horizon = len(episodes), max(len(ep.steps) for ep in episodes)
    z = wm.encode([ep.steps[0].observation for ep in episodes])
    window = Window.start(z, wm.encode([ep.task for ep in episodes]), wm.hparams.window, wm.cfg.d_action)
    read: dict[int, list[str]] = {}
    sim_return = torch.zeros(b, dtype=torch.float64)
    survive = torch.ones(b, dtype=torch.float64)
    for t in range(horizon):
        live = [i for i, ep in enumerate(episodes) if t < len(ep.steps)]
        actions = [episodes[i].steps[t].action if t < len(episodes[i].steps) else "" for i in range(b)]
        a = wm.embed_actions(actions)
        c = window.context(wm)
        z_next = wm.sampler.sample(lambda x, tt, c=c, a=a: wm.eps(x, tt, c, a), tuple(z.shape), gen, z.device)
        ids = action_ids(wm.actions, actions) if by_action else None
        z_next, nearest = wm.proposal_bank.snap(z_next, ids)  # snapped, as in simulation
        reward, done_logit = wm.heads.transition(z_next, c, a)
        mask = torch.zeros(b, dtype=torch.float64)
        mask[live] = 1.0
        sim_return += mask * survive * gamma**t * reward.double().cpu()
        survive *= 1 - mask * torch.sigmoid(done_logit).double().cpu()
        if t + 1 in ks:
            read[t + 1] = [wm.proposal_bank.texts[j] for j in nearest.tolist()]
        window = window.shifted(z_next, a)
        z = z_next
    out: dict[str, float] = {}
    nearest = LoggedWorld(train_episodes, moves=True)  # the text worlds of the training split, built once
    analogy = AnalogyWorld(train_episodes, nearest)
    controls = _control_states(episodes, nearest, analogy, ks, seed)
    controls["snap_ceiling"], reachable = _snap_ceiling(wm, episodes, ks, by_action, state_key)
    out.update({f"fidelity/snap_reachable@{k}": v for k, v in reachable.items()})
    controls["guided_analogy"] = _guided_analogy_states(wm, episodes, analogy, ks, seed)
    if getattr(wm, "text_decoder", None) is not None:
        controls["decoded"] = decoded_states(wm, episodes, ks, seed)
        controls["decoded_teacher"] = decoded_states(wm, episodes, ks, seed, teacher=True)
        for name in ("decoded", "decoded_teacher"):
            for k in ks:
                rows = [i for i, ep in enumerate(episodes) if len(ep.steps) >= k]
                if rows:
                    hits = [controls[name][k][i] == _true_observation(episodes[i], k) for i in rows]
                    out[f"fidelity/{name}_exact@{k}"] = float(np.mean(hits))
    for k in ks:
        rows = [i for i, ep in enumerate(episodes) if len(ep.steps) >= k]
        if not rows:
            continue
        true = [state_key(_true_observation(episodes[i], k)) for i in rows]
        out[f"fidelity/state_acc@{k}"] = float(np.mean([state_key(read[k][i]) == y for i, y in zip(rows, true)]))
        for name, states in controls.items():
            out[f"fidelity/{name}_state_acc@{k}"] = float(
                np.mean([state_key(states[k][i]) == y for i, y in zip(rows, true)])
            )
    logged = np.array([ep.discounted_return(gamma) for ep in episodes])
    simulated = sim_return.numpy()
    if logged.std() > 0 and simulated.std() > 0:
        out["fidelity/return_corr"] = float(np.corrcoef(simulated, logged)[0, 1])
    out["fidelity/sim_end_prob"] = float(1 - survive.mean())
    out["fidelity/logged_end_rate"] = float(np.mean([not ep.info.get("truncated", False) for ep in episodes]))
    out["fidelity/episodes"] = float(b)
    return out


@torch.no_grad()
def _snap_ceiling(
    wm, episodes: Sequence[Episode], ks: Sequence[int], by_action: bool, state_key: Callable[[str], object]
) -> tuple[dict[int, list[str]], dict[int, float]]:
    """The observation after k logged actions that a perfect sample would be snapped to (the true observation
    encoded and snapped as the replay snaps, by its k-th action when `by_action`), per episode ("" past the
    episode's end); its state accuracy bounds what any sampler can reach with this bank of logged states.
    And per k the share of replays for which the bank holds a state the snap may land on with the true
    state's key (what a snap by a better distance could reach)."""
    texts: dict[int, list[str]] = {}
    reachable: dict[int, float] = {}
    keys = [state_key(t) for t in wm.proposal_bank.texts]
    for k in ks:
        rows = [i for i, ep in enumerate(episodes) if len(ep.steps) >= k]
        texts[k] = [""] * len(episodes)
        if not rows:
            continue
        true = [_true_observation(episodes[i], k) for i in rows]
        ids = action_ids(wm.actions, [episodes[i].steps[k - 1].action for i in rows]) if by_action else None
        _, nearest = wm.proposal_bank.snap(wm.encode(true), ids)
        for i, j in zip(rows, nearest.tolist()):
            texts[k][i] = wm.proposal_bank.texts[j]
        allowed = wm.proposal_bank.action_rows(len(rows), ids)
        reachable[k] = float(
            np.mean(
                [
                    any(keys[j] == state_key(y) for j in allowed[r].nonzero().flatten().tolist())
                    for r, y in enumerate(true)
                ]
            )
        )
    return texts, reachable


@torch.no_grad()
def _guided_analogy_states(
    wm, episodes: Sequence[Episode], world: AnalogyWorld, ks: Sequence[int], seed: int
) -> dict[int, list[str]]:
    """The observation after k logged actions when the learned model picks each next state among the
    proposals of the analogy `world`, per episode ("" past the episode's end)."""
    gen = torch.Generator().manual_seed(seed)
    states = [
        world.start(LoggedStart(ep.task, ep.steps[0].observation, ep.steps[0].admissible, ep.seed)) for ep in episodes
    ]
    z = wm.encode([s.observation for s in states])
    window = Window.start(z, wm.encode([ep.task for ep in episodes]), wm.hparams.window, wm.cfg.d_action)
    out: dict[int, list[str]] = {k: [""] * len(episodes) for k in ks}
    for t in range(max(len(ep.steps) for ep in episodes)):
        chosen = {i: ep.steps[t].action for i, ep in enumerate(episodes) if t < len(ep.steps)}
        a = wm.embed_actions([chosen.get(i, "") for i in range(len(episodes))])
        c = window.context(wm)
        sample = wm.sampler.sample(lambda x, tt, c=c, a=a: wm.eps(x, tt, c, a), tuple(z.shape), gen, z.device)
        picked, z_next = pick_proposals(wm, world, states, chosen, sample, z)
        move_to(world, states, picked)
        if t + 1 in ks:
            for i in chosen:
                out[t + 1][i] = states[i].observation
        window = window.shifted(z_next, a)
        z = z_next
    return out


@torch.no_grad()
def decoded_states(
    wm,
    episodes: Sequence[Episode],
    ks: Sequence[int],
    seed: int,
    teacher: bool = False,
    guidance=None,
) -> dict[int, list[str]]:
    """The decoded observation after k logged actions, per episode ("" past the episode's end): closed loop
    (the history is the model's own unsnapped samples, each decoded after the task and the texts decoded
    before it, the first after the logged start) or, with `teacher`, one step from the logged history (the
    encoded logged observations up to k - 1, decoded after the task and the logged observations).
    `guidance` (a GuidanceConfig): its omega applies as classifier-free guidance (None: the conditional model)."""
    guidance = guidance or GuidanceConfig(omega=1.0, eta=0.0)
    gen = torch.Generator().manual_seed(seed)
    b = len(episodes)
    z = wm.encode([ep.steps[0].observation for ep in episodes])
    window = Window.start(z, wm.encode([ep.task for ep in episodes]), wm.hparams.window, wm.cfg.d_action)
    out: dict[int, list[str]] = {k: [""] * b for k in ks}
    # what each replay read before: the logged start, then the decoded texts (the logged ones with `teacher`)
    read = [[ep.steps[0].observation] for ep in episodes]
    decoder = wm.require_text_decoder()
    for t in range(min(max(len(ep.steps) for ep in episodes), max(ks))):
        actions = [ep.steps[t].action if t < len(ep.steps) else "" for ep in episodes]
        a = wm.embed_actions(actions)
        c = window.context(wm)
        eps_fn = guided_eps_fn(lambda x, tt, act, c=c: wm.eps(x, tt, c, act), a, wm.abar, guidance)
        z_next = wm.sampler.sample(eps_fn, tuple(z.shape), gen, z.device)
        written = wm.decode_text(z_next, [decoder.source_text(ep.task, r) for ep, r in zip(episodes, read)])
        if t + 1 in ks:
            for i, text in enumerate(written):
                if t < len(episodes[i].steps):
                    out[t + 1][i] = text
        if teacher:  # the logged observation takes the sample's place in the history
            written = [_true_observation(ep, min(t + 1, len(ep.steps))) for ep in episodes]
            z_next = wm.encode(written)
        read = [(r + [text])[-max(1, decoder.cfg.sources) :] for r, text in zip(read, written)]
        window = window.shifted(z_next, a)
    return out


def _control_states(
    episodes: Sequence[Episode], nearest: LoggedWorld, analogy: AnalogyWorld, ks: Sequence[int], seed: int
) -> dict[str, dict[int, list[str]]]:
    """Each control's observation after k logged actions, per episode (`stay`: the first one; `nearest` and
    `analogy`: the text worlds of the training split, simulation/worlds.py and simulation/analogy.py)."""
    out: dict[str, dict[int, list[str]]] = {"stay": {k: [ep.steps[0].observation for ep in episodes] for k in ks}}
    for name, world in (("nearest", nearest), ("analogy", analogy)):
        rng = np.random.default_rng(seed)
        out[name] = {k: [] for k in ks}
        for ep in episodes:
            state = world.start(LoggedStart(ep.task, ep.steps[0].observation, ep.steps[0].admissible, ep.seed))
            for t, step in enumerate(ep.steps):
                state, _, _ = world.step(state, step.action, rng)
                if t + 1 in ks:
                    out[name][t + 1].append(state.observation)
            for k in ks:
                if len(ep.steps) < k:
                    out[name][k].append("")
    return out
