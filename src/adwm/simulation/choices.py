"""What the agent does in a simulated state of the learned world model: the action it picks among the
state's candidate set (read through its reader, the eps mixture drawn in two stages) or writes, and the
candidate sets themselves (the logged lists of the first states, then `evaluate.diffusion.candidates`)."""

from __future__ import annotations

from dataclasses import replace

import torch

from adwm.models.world_model.protocol import WorldModel
from adwm.policies.config import PolicyConfig
from adwm.policies.sampling import action_log_probs, uses_model
from adwm.simulation.readers import LatentReader
from adwm.simulation.starts import Start


def chosen_actions(
    wm: WorldModel, policy: PolicyConfig, reader, z, tasks, cand, live, gen, texts: list[str] | None = None
) -> torch.Tensor:
    """The vocabulary index (B,) of the action the agent picks among each live state's candidates (`texts`:
    each state's text where the simulator keeps one).

    The eps mixture (1 - eps) pi + eps uniform is drawn in two stages: a coin per rollout picks the branch,
    and the agent reads only the states whose coin chose it (the same distribution as drawing from the
    mixture, at 1 - eps of the agent forwards)."""
    ids = [torch.nonzero(cand[i]).flatten() for i in live]
    if reader is None or not uses_model(policy):
        reading = []
    elif policy.eps > 0:
        reading = torch.nonzero(torch.rand(len(live), generator=gen) >= policy.eps).flatten().tolist()
    else:
        reading = list(range(len(live)))
    scores = {}
    if reading:
        options = [[wm.actions[j] for j in ids[k].tolist()] for k in reading]
        rows = [live[k] for k in reading]
        kept = {} if texts is None else {"texts": [texts[i] for i in rows]}  # only a reader that keeps texts
        read = reader.scores(z[rows], [tasks[i] for i in rows], options, **kept)
        scores = dict(zip(reading, read))
    agent = replace(policy, eps=0.0)
    choice = torch.zeros(len(tasks), dtype=torch.long)
    for k, i in enumerate(live):
        if k in scores:  # drawn on the CPU by the seeded generator
            p = action_log_probs(scores[k].detach().cpu(), agent).exp()
        else:
            p = torch.ones(len(ids[k]), dtype=torch.float64)
        choice[i] = ids[k][torch.multinomial(p.float(), 1, generator=gen).to(ids[k].device)]
    return choice


def written_actions(
    wm: WorldModel, policy: PolicyConfig, reader: LatentReader | None, z, tasks, rngs, texts: list[str] | None = None
) -> list[str]:
    """The actions the agent writes in latent states z: its own text where it reads the state; for a uniform
    policy and for the eps share, a logged action drawn uniformly from the nearest logged state's list
    (`evaluate.diffusion.agents_write` in a log with lists) or from the whole vocabulary (a free-form log, or
    a state logged without its list)."""
    out = [""] * len(tasks)
    random = [reader is None or r.random() < policy.eps for r in rngs]
    reading = [i for i, u in enumerate(random) if not u]
    if reading:
        kept = {} if texts is None else {"texts": [texts[i] for i in reading]}
        for i, text in zip(
            reading, reader.write(z[reading], [tasks[i] for i in reading], [rngs[i] for i in reading], **kept)
        ):
            out[i] = text
    drawn = [i for i, u in enumerate(random) if u]
    lists = wm.propose(z[drawn], "retrieval").cpu() if drawn and not wm.free_form else None
    for k, i in enumerate(drawn):
        listed = [] if lists is None else torch.nonzero(lists[k]).flatten().tolist()
        if listed:
            out[i] = wm.actions[listed[int(rngs[i].integers(len(listed)))]]
        else:
            out[i] = wm.actions[int(rngs[i].integers(len(wm.actions)))]
    return out


def first_candidates(wm: WorldModel, z: torch.Tensor, starts: list[Start], max_candidates: int) -> torch.Tensor:
    """Candidate sets (B, V) of the first states: their logged lists, or the world model's proposal."""
    cand = torch.zeros(len(starts), len(wm.actions), dtype=torch.bool, device=z.device)
    unlisted = [i for i, s in enumerate(starts) if s.admissible is None]
    for i, s in enumerate(starts):
        if s.admissible is not None:
            cand[i, s.admissible] = True
    if unlisted:  # a first step logged without its list: the world model proposes one
        cand[unlisted] = wm.propose(z[unlisted])
        cand[~cand.any(-1)] = True
    return wm.cap_candidates(z, cand, max_candidates)


def next_candidates(
    wm: WorldModel,
    z_next: torch.Tensor,
    c: torch.Tensor,
    a: torch.Tensor,
    prev: torch.Tensor,
    max_candidates: int,
    rule: str,
    gen: torch.Generator | None = None,
) -> torch.Tensor:
    """Candidate sets (B, V) of the simulated next states z_next (B, L, d) under `rule` (CANDIDATE_RULES):
    the logged list of the nearest logged state, or the edit head's draw (`gen`) or cut."""
    if rule == "retrieval":
        return wm.cap_candidates(z_next, wm.propose(z_next, "retrieval"), max_candidates)
    return wm.propose_next(z_next, c, a, prev, max_candidates, gen if rule == "sample" else None)
