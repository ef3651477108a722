"""An estimated behaviour policy for logs without behaviour probabilities (API models, people, other
frameworks): the importance-weighted baselines then run as `<name>_est` on its probabilities.

The model is a conditional logit over each logged state's candidate actions (its admissible list, with
the logged action added when it was off the list; in a log without lists, the logged action vocabulary):

    log p_b(a | s) = e(a) . (W_obs e(obs) + W_task e(task) + b)  -  log sum_{a' in A(s)} exp(...)

with e(.) the unit-norm text embeddings the action-value baselines use (`ope/features.py`). With
one-hot embeddings it is a table of per-(state, action) logits, so its maximum-likelihood fit is the
empirical frequency of each action in each state, which converges to the behaviour policy as the log
grows. It is fitted by L-BFGS on the summed log-likelihood of the logged actions plus `l2` times the
squared norm of the parameters; the penalty is not scaled with the log, so its weight vanishes as the
log grows. The log may mix several behaviour agents: the model then estimates their mixture, which is
the behaviour policy the log was drawn from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from adwm.ope.features import StepFeatures

CHUNK = 1 << 17  # (step, action) scores a run of steps computes at once (docs/decisions.md)


@dataclass
class BehaviourFit:
    log_probs: np.ndarray  # (M,) log p_b(a_k | s_k) of each logged step's action, episode-major
    nll: float  # mean negative log-likelihood of the logged actions (nats per step)
    evaluations: int  # objective evaluations L-BFGS took (iterations plus line-search steps)


def _candidates(features: StepFeatures, actions: Sequence[str]) -> tuple[list[list[int]], list[int]]:
    """Per logged step, the embedding indices of its candidate actions and the logged action's position."""
    vocabulary = list(dict.fromkeys(actions))
    cands, chosen = [], []
    for state, action in zip(features.states, actions):
        listed = list(dict.fromkeys(state.admissible)) if state.admissible else list(vocabulary)
        if action not in listed:
            listed.append(action)
        cands.append([features.index[a] for a in listed])
        chosen.append(listed.index(action))
    return cands, chosen


def _runs(cands: list[list[int]], chunk: int) -> list[tuple[int, int, list[int]]]:
    """Consecutive runs of logged steps, each with the sorted candidate actions its steps list, so that a
    run's (steps x actions) score matrix holds at most `chunk` entries (a single step may exceed it)."""
    runs, start, seen = [], 0, set()
    for i, c in enumerate(cands):
        grown = len(seen) + len(set(c) - seen)
        if i > start and (i - start + 1) * grown > chunk:
            runs.append((start, i, sorted(seen)))
            start, seen = i, set()
        seen.update(c)
    runs.append((start, len(cands), sorted(seen)))
    return runs


def fit_behaviour(
    features: StepFeatures,
    actions: Sequence[str],
    l2: float = 1.0,
    max_iterations: int = 200,
    chunk: int = CHUNK,
) -> BehaviourFit:
    """Fits the conditional logit on the logged steps of `features` (their states) taking `actions`;
    `chunk` bounds the (state, action) scores computed at once."""
    if len(actions) != len(features.states):
        raise ValueError(f"behaviour model: {len(features.states)} logged states but {len(actions)} actions")
    if l2 <= 0:
        raise ValueError(f"ope.behaviour_l2: expected > 0, got {l2}")
    cands, chosen = _candidates(features, actions)
    emb = torch.as_tensor(features.emb, dtype=torch.float64)
    e_obs = torch.as_tensor(features.e_obs, dtype=torch.float64)
    e_task = torch.as_tensor(features.e_task, dtype=torch.float64)
    d = emb.size(1)
    w_obs = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    w_task = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(d, dtype=torch.float64, requires_grad=True)
    params = [w_obs, w_task, bias]

    # A run of consecutive steps scores only the actions its own steps list: the steps of an episode share
    # most of their lists, while a log's whole vocabulary (ScienceWorld's: tens of thousands of commands)
    # is many times any run's. Gradients add up over the runs.
    chunks = []
    for start, stop, vocabulary in _runs(cands, chunk):
        local = {a: j for j, a in enumerate(vocabulary)}
        width = max(len(c) for c in cands[start:stop])
        idx = torch.zeros(stop - start, width, dtype=torch.long)
        valid = torch.zeros(stop - start, width, dtype=torch.bool)
        for row, c in enumerate(cands[start:stop]):
            idx[row, : len(c)] = torch.tensor([local[a] for a in c])
            valid[row, : len(c)] = True
        rows = slice(start, stop)
        chunks.append((e_obs[rows], e_task[rows], torch.tensor(vocabulary), idx, valid, torch.tensor(chosen[rows])))

    def log_probs(part: tuple) -> torch.Tensor:
        obs, task, vocabulary, cand, ok, chosen_at = part
        # e(a) . (W_obs e(obs) + W_task e(task) + b) for every action the run lists
        every = (obs @ w_obs.T + task @ w_task.T + bias) @ emb[vocabulary].T  # (steps, actions)
        scores = every.gather(1, cand).masked_fill(~ok, float("-inf"))
        return scores.log_softmax(-1).gather(1, chosen_at[:, None]).squeeze(1)  # (steps,)

    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iterations, line_search_fn="strong_wolfe")
    evaluations = 0

    def closure() -> torch.Tensor:
        nonlocal evaluations
        evaluations += 1
        opt.zero_grad()
        loss = l2 * sum((p**2).sum() for p in params)
        loss.backward()
        total = float(loss.detach())
        for part in chunks:
            nll = -log_probs(part).sum()
            nll.backward()
            total += float(nll.detach())
        return torch.tensor(total, dtype=torch.float64)

    opt.step(closure)
    with torch.no_grad():
        lp = torch.cat([log_probs(part) for part in chunks]).numpy()
    return BehaviourFit(log_probs=lp, nll=float(-lp.mean()), evaluations=evaluations)
