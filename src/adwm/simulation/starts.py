"""Where simulated rollouts in the learned world model start, and what they know of the log: its first
steps, the logged worlds of its states, its reward range."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.models.world_model.protocol import WorldModel


@dataclass
class Start:
    task: str
    observation: str
    admissible: list[int] | None  # logged-action ids; None: not logged, the world model proposes the set
    world: int = -1  # the logged world it starts in (the data module's world id; -1: none)
    first: str | None = None  # an action the rollout takes first (a return of Q(s, a)); None: the agent's
    steps: int = 0  # the most steps the rollout takes (a start at a later logged step); 0: the horizon


def logged_starts(dm) -> list[Start]:
    """First steps of every logged episode (train and validation), with their admissible lists where logged."""
    out = []
    for x in dm.train_items + dm.val_items:
        if x["t"] == 0:
            adm = list(x["admissible"]) if x["admissible"] else None
            out.append(Start(dm.tasks[x["task"]], dm.observations[x["history_obs"][-1]], adm, x["world"]))
    if not out:
        raise ValueError(f"{dm.cfg.log}: no logged first step to start rollouts from")
    return out


def attach_logged_worlds(wm: WorldModel, dm) -> None:
    """Tell the world model's bank in which logged worlds each of its states was seen, with the ids of
    `logged_starts(dm)` (evaluate.diffusion.snap_world), and the logged transitions between its states
    (evaluate.diffusion.snap_by_transition); a bank without texts is left as it is."""
    bank = wm.proposal_bank
    if bank is not None and bank.texts is not None:
        bank.attach_worlds(dm.state_worlds(bank.texts), dm.n_worlds)
        bank.attach_transitions(dm.transitions(bank.texts))


def logged_reward_range(dm) -> tuple[float, float]:
    """The smallest and largest reward of the training log."""
    rewards = [x["reward"] for x in dm.train_items]
    return float(min(rewards)), float(max(rewards))
