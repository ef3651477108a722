"""Candidate actions by retrieval: the admissible list of the nearest logged state in latent space.

The fallback of the learned proposal head (and its own `world_model.proposal=retrieval` mode):
it can only return sets that were really admissible somewhere in the logs, which keeps an
eps-greedy agent's random branch on real actions where the head is unsure.

The bank is also what simulation snaps sampled latents to. It records, per logged state, the actions
whose logged transitions arrived there, so a snap can keep to the states the chosen action led to in
the log (`nearest(z, actions)`; decisions.md: snapping by action), and the logged worlds (episodes' starts)
each state was seen in, so a snap can keep to the rollout's own world where the log saw the outcome there
(`nearest(z, actions, worlds)`; decisions.md: snapping within the world), and the logged transitions between
its states, so a snap from a logged state by an action the log took there keeps to the states it led to
(`nearest(z, actions, worlds, moves=(states, actions))`; decisions.md: snapping by transition), with their
logged rewards (`logged_rewards`).
"""

from __future__ import annotations

import torch


class ProposalBank:
    """Flat latents (N, D) of logged states with their admissible action ids (ragged, as flat + offsets)."""

    def __init__(
        self,
        latents: torch.Tensor,
        ids: torch.Tensor,
        offsets: torch.Tensor,
        n_actions: int,
        texts: list[str] | None = None,
        arrivals: torch.Tensor | None = None,
    ) -> None:
        if latents.size(0) == 0:
            raise ValueError("proposal bank: no logged state with an admissible list to retrieve from")
        if offsets.numel() != latents.size(0) + 1:
            raise ValueError(f"proposal bank: {latents.size(0)} latents but {offsets.numel() - 1} admissible lists")
        if texts is not None and len(texts) != latents.size(0):
            raise ValueError(f"proposal bank: {latents.size(0)} latents but {len(texts)} texts")
        if arrivals is not None and tuple(arrivals.shape) != (latents.size(0), n_actions):
            raise ValueError(
                f"proposal bank: arrivals of shape {tuple(arrivals.shape)}, expected ({latents.size(0)}, {n_actions})"
            )
        self.latents, self.ids, self.offsets, self.n_actions = latents, ids, offsets, n_actions
        self.texts = texts  # the logged observations, for readers that need text (the default reader)
        # dense multi-hot once: lookups are then a single gather (N x V bools, ~8 MB for 30k x 262)
        self.sets = _multi_hot(ids, offsets.diff(), n_actions)
        # (N, V) bools: which logged actions led to each state (None: a bank saved without them)
        self.arrivals = None if arrivals is None else arrivals.bool()
        # per logged world, the bank states seen in it (ragged: flat + offsets; None: not attached). Attached
        # from the data module wherever rollouts start from it, so the ids are always the starts' own
        self.world_states: torch.Tensor | None = None
        self.world_offsets: torch.Tensor | None = None
        # (T, 4) logged transitions as bank indices: state, action id, next state, world, and (T,) their mean
        # logged rewards (None: not attached)
        self.transitions: torch.Tensor | None = None
        self.transition_rewards: torch.Tensor | None = None
        self._index: dict[str, int] | None = None

    def attach_worlds(self, state_worlds: list[list[int]], n_worlds: int) -> None:
        """`state_worlds[i]`: the ids (0..n_worlds-1) of the logged worlds in which bank state i was seen."""
        if len(state_worlds) != self.latents.size(0):
            raise ValueError(f"proposal bank: {self.latents.size(0)} states but {len(state_worlds)} world lists")
        members: list[list[int]] = [[] for _ in range(n_worlds)]
        for i, worlds in enumerate(state_worlds):
            for w in worlds:
                members[w].append(i)
        self.world_states = torch.tensor([i for m in members for i in m], dtype=torch.long)
        self.world_offsets = torch.tensor([0] + [len(m) for m in members]).cumsum(0)

    def attach_transitions(self, transitions: list[tuple[int, int, int, int, float]]) -> None:
        """The logged transitions (state, action id, next state, world id, mean logged reward), states as
        bank indices."""
        t = torch.tensor([row[:4] for row in transitions], dtype=torch.long).view(-1, 4)
        n = self.latents.size(0)
        bad = (t[:, [0, 2]] < 0).any(-1) | (t[:, [0, 2]] >= n).any(-1) | (t[:, 1] < 0) | (t[:, 1] >= self.n_actions)
        if bad.any():
            raise ValueError(
                f"proposal bank: transition {t[bad][0].tolist()} is outside {n} states / {self.n_actions} actions"
            )
        self.transitions = t
        self.transition_rewards = torch.tensor([float(row[4]) for row in transitions], dtype=torch.float32)

    def logged_rewards(
        self, states: torch.Tensor, actions: torch.Tensor, next_states: torch.Tensor, worlds: torch.Tensor | None
    ) -> torch.Tensor:
        """(B,) the logged reward of each row's transition (state, action, next state) in its world (in any
        world where `worlds` is None; the mean over worlds), NaN where the log has no such transition."""
        hit = self._logged_moves(states, actions, worlds) & (self.transitions[None, :, 2] == next_states.cpu()[:, None])
        total = (hit.float() * self.transition_rewards[None, :]).sum(-1)
        count = hit.sum(-1)
        return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float("nan")))

    def index_of(self, texts: list[str]) -> torch.Tensor:
        """Bank index (B,) of each observation text; -1 for a text the bank does not hold (or a bank without
        texts)."""
        if self.texts is None:
            return torch.full((len(texts),), -1, dtype=torch.long)
        if self._index is None:
            self._index = {text: i for i, text in enumerate(self.texts)}
        return torch.tensor([self._index.get(t, -1) for t in texts], dtype=torch.long)

    def _successor_rows(self, states: torch.Tensor, actions: torch.Tensor, worlds: torch.Tensor | None) -> torch.Tensor:
        """(B, N) bools: the states the log reached from bank state b by action b, in world b where `worlds`
        is given (else in any world)."""
        rows, cols = torch.nonzero(self._logged_moves(states, actions, worlds), as_tuple=True)
        out = torch.zeros(states.numel(), self.latents.size(0), dtype=torch.bool)
        out[rows, self.transitions[cols, 2]] = True
        return out

    def _logged_moves(self, states: torch.Tensor, actions: torch.Tensor, worlds: torch.Tensor | None) -> torch.Tensor:
        """(B, T) bools: the logged transitions that leave row b's state by its action (in its world where
        `worlds` is given)."""
        src, act, _, world = self.transitions.unbind(-1)
        hit = (src[None, :] == states.cpu()[:, None]) & (act[None, :] == actions.cpu()[:, None])
        if worlds is not None:
            hit &= world[None, :] == worlds.cpu()[:, None]
        return hit

    @classmethod
    def build(
        cls,
        latents: torch.Tensor,
        admissible: list[list[int]],
        n_actions: int,
        texts: list[str] | None = None,
        arrivals: list[list[int]] | None = None,
    ) -> ProposalBank:
        """`arrivals[i]`: the ids of the logged actions whose transitions led to state i."""
        ids = torch.tensor([a for adm in admissible for a in adm], dtype=torch.long)
        offsets = torch.tensor([0] + [len(adm) for adm in admissible]).cumsum(0)
        arrived = None
        if arrivals is not None:
            if len(arrivals) != len(admissible):
                raise ValueError(f"proposal bank: {len(admissible)} states but {len(arrivals)} arrival lists")
            flat = torch.tensor([a for arr in arrivals for a in arr], dtype=torch.long)
            arrived = _multi_hot(flat, torch.tensor([len(a) for a in arrivals]), n_actions)
        return cls(latents.detach().float().cpu(), ids, offsets, n_actions, texts, arrived)

    def nearest(
        self,
        z: torch.Tensor,
        actions: torch.Tensor | None = None,
        worlds: torch.Tensor | None = None,
        chunk: int = 8192,
        stay_in_world: bool = False,
        moves: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Index of the nearest bank latent (Euclidean) for each row of z (B, ...) -> (B,).

        With `actions` (B,) vocabulary ids (-1: none), row b keeps to the states that a logged transition by
        action b arrived at, where there is one; elsewhere (a terminal or unlogged action, a bank without
        arrivals) every state competes. With `worlds` (B,) logged world ids (-1: none; needs
        `attach_worlds`), row b then keeps to those of them seen in world b, where there is one; where there
        is none, to every state of world b with `stay_in_world` (where it has one). With `moves` = (states,
        actions), each (B,): the bank index of each row's current state (-1: none) and the action it takes
        (needs `attach_transitions`), a row whose state its world left by that action in the log (any world
        without `worlds`) keeps to the states that led to; the rules before apply to the other rows."""
        q = z.detach().flatten(1).float().cpu()
        keep = self.action_rows(q.size(0), actions) if actions is not None and self.arrivals is not None else None
        if worlds is not None:
            if self.world_states is None:
                raise RuntimeError("proposal bank: snapping within the world needs the logged worlds (attach_worlds)")
            outcomes = keep if keep is not None else torch.ones(q.size(0), self.latents.size(0), dtype=torch.bool)
            own = self._world_mask(worlds.detach().cpu().long())
            keep = own & outcomes
            unseen = ~keep.any(-1)  # the world never showed this outcome
            if stay_in_world:
                keep[unseen] = own[unseen]
                unseen = ~keep.any(-1)
            keep[unseen] = outcomes[unseen]  # the action's outcomes anywhere
        if moves is not None and self.transitions is not None:
            successors = self._successor_rows(*moves, worlds)
            left = successors.any(-1)
            if keep is None:
                keep = torch.ones(q.size(0), self.latents.size(0), dtype=torch.bool)
            keep[left] = successors[left]
        best_d = torch.full((q.size(0),), float("inf"))
        best_i = torch.zeros(q.size(0), dtype=torch.long)
        for start in range(0, self.latents.size(0), chunk):
            d = torch.cdist(q, self.latents[start : start + chunk])
            if keep is not None:
                d = d.masked_fill(~keep[:, start : start + chunk], float("inf"))
            d, i = d.min(-1)
            better = d < best_d
            best_d, best_i = torch.where(better, d, best_d), torch.where(better, i + start, best_i)
        return best_i

    def _world_mask(self, worlds: torch.Tensor) -> torch.Tensor:
        """(B, N) bools: the bank states seen in each row's world (none for -1 or a world beyond the bank)."""
        out = torch.zeros(worlds.numel(), self.latents.size(0), dtype=torch.bool)
        n_worlds = self.world_offsets.numel() - 1
        for row, w in enumerate(worlds.tolist()):
            if 0 <= w < n_worlds:
                out[row, self.world_states[self.world_offsets[w] : self.world_offsets[w + 1]]] = True
        return out

    def action_rows(self, b: int, actions: torch.Tensor | None) -> torch.Tensor:
        """(B, N) bools: the states a snap by each row's action may land on, those the action led to in the
        log (every state for -1, an action that led nowhere, `actions` None or a bank without arrivals)."""
        if actions is None or self.arrivals is None:
            return torch.ones(b, self.latents.size(0), dtype=torch.bool)
        act = actions.detach().cpu().long()
        known = act >= 0
        keep = torch.zeros(b, self.latents.size(0), dtype=torch.bool)
        keep[known] = self.arrivals[:, act[known]].T
        keep[~keep.any(-1)] = True
        return keep

    def snap(
        self,
        z: torch.Tensor,
        actions: torch.Tensor | None = None,
        worlds: torch.Tensor | None = None,
        stay_in_world: bool = False,
        moves: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each latent of z (B, L, d) replaced by its nearest bank latent (`nearest`, keeping to the
        states each action led to when `actions` is given, to the row's world when `worlds` is given, and
        to the logged successors of the row's (state, action) when `moves` is given)
        -> (snapped (B, L, d) on z's device, indices (B,))."""
        index = self.nearest(z, actions, worlds, stay_in_world=stay_in_world, moves=moves)
        return self.latents[index].view_as(z).to(z.device), index

    def lookup(self, z: torch.Tensor) -> torch.Tensor:
        """Admissible multi-hot (B, V) of the nearest logged state of each latent."""
        return self.sets[self.nearest(z)].to(z.device)

    def state_dict(self) -> dict:
        return {
            "latents": self.latents,
            "ids": self.ids,
            "offsets": self.offsets,
            "n_actions": self.n_actions,
            "texts": self.texts,
            "arrivals": self.arrivals,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> ProposalBank:
        return cls(
            state["latents"],
            state["ids"],
            state["offsets"],
            state["n_actions"],
            state.get("texts"),
            state.get("arrivals"),
        )


def _multi_hot(flat: torch.Tensor, counts: torch.Tensor, n_actions: int) -> torch.Tensor:
    """(N, V) bools from ragged id lists given as their concatenation `flat` and per-row `counts` (N,)."""
    out = torch.zeros(counts.numel(), n_actions, dtype=torch.bool)
    out[torch.repeat_interleave(torch.arange(counts.numel()), counts), flat] = True
    return out


def action_ids(vocabulary: list[str], actions: list[str]) -> torch.Tensor:
    """Vocabulary index (B,) of each action text; -1 for an action outside the vocabulary."""
    index = {a: i for i, a in enumerate(vocabulary)}
    return torch.tensor([index.get(a, -1) for a in actions], dtype=torch.long)
