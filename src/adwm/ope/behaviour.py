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


def fit_behaviour(
    features: StepFeatures,
    actions: Sequence[str],
    l2: float = 1.0,
    max_iterations: int = 200,
    chunk: int = 1 << 22,
) -> BehaviourFit:
    """Fits the conditional logit on the logged steps of `features` (their states) taking `actions`;
    `chunk` bounds the (state, action) pairs scored at once."""
    if len(actions) != len(features.states):
        raise ValueError(f"behaviour model: {len(features.states)} logged states but {len(actions)} actions")
    if l2 <= 0:
        raise ValueError(f"ope.behaviour_l2: expected > 0, got {l2}")
    cands, chosen = _candidates(features, actions)
    m, width = len(cands), max(len(c) for c in cands)
    # the candidate actions' own table: scores are e(a) . W e(obs) = (e(a) W) . e(obs), so each evaluation
    # multiplies the (actions, d) table by the parameters once instead of gathering (states, candidates, d)
    vocabulary = sorted({i for c in cands for i in c})
    local = {i: j for j, i in enumerate(vocabulary)}
    table = torch.as_tensor(features.emb[vocabulary], dtype=torch.float64)
    idx = torch.zeros(m, width, dtype=torch.long)
    valid = torch.zeros(m, width, dtype=torch.bool)
    for i, c in enumerate(cands):
        idx[i, : len(c)] = torch.tensor([local[a] for a in c])
        valid[i, : len(c)] = True
    e_obs = torch.as_tensor(features.e_obs, dtype=torch.float64)
    e_task = torch.as_tensor(features.e_task, dtype=torch.float64)
    target = torch.tensor(chosen)
    d = table.size(1)
    w_obs = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    w_task = torch.zeros(d, d, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(d, dtype=torch.float64, requires_grad=True)
    params = [w_obs, w_task, bias]

    # chunks of states bound the (texts, actions) score matrices' memory; gradients add up over them. A
    # chunk scores each distinct observation and task once (a log repeats its starts and its tasks)
    per = max(chunk // len(vocabulary), 1)  # states a chunk
    chunks = []
    for start in range(0, m, per):
        rows = slice(start, min(start + per, m))
        obs, at_obs = torch.unique(e_obs[rows], dim=0, return_inverse=True)
        task, at_task = torch.unique(e_task[rows], dim=0, return_inverse=True)
        chunks.append((obs, at_obs, task, at_task, idx[rows], valid[rows], target[rows]))

    def log_probs(part: tuple, by_obs: torch.Tensor, by_task: torch.Tensor, by_bias: torch.Tensor) -> torch.Tensor:
        obs, at_obs, task, at_task, cand, ok, chosen_at = part
        every = (obs @ by_obs.T)[at_obs] + (task @ by_task.T)[at_task] + by_bias  # (states, actions)
        scores = every.gather(1, cand).masked_fill(~ok, float("-inf"))
        return scores.log_softmax(-1).gather(1, chosen_at[:, None]).squeeze(1)  # (states,)

    def projected() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return table @ w_obs, table @ w_task, table @ bias

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
            nll = -log_probs(part, *projected()).sum()
            nll.backward()
            total += float(nll.detach())
        return torch.tensor(total, dtype=torch.float64)

    opt.step(closure)
    with torch.no_grad():
        by = projected()
        lp = torch.cat([log_probs(part, *by) for part in chunks]).numpy()
    return BehaviourFit(log_probs=lp, nll=float(-lp.mean()), evaluations=evaluations)
