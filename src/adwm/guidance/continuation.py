"""Continuation factor C of the policy-guided kernel (our formulation where the paper is silent).

    log C(z_{t+1}) = log sum_{a'} P_b(a' | h_{t+1}) pi_e(a' | z_{t+1})     one-step term
                   + V_alpha(z_{t+1})                                      learned tail

The one-step term is high where the logged agents' next action agrees with what
pi_e would do, i.e. where the logs support pi_e's continuation; pi_e reads the
candidate latent through the projector, so its gradient flows z -> G_psi -> pi_e.
V_alpha is a small value network on latents fitted per pi_e by TD on logged
transitions with per-step reward log pi_e(a_k | o_k) (only pi_e's log-probs of
logged actions are used, never the behaviour agents').

`guidance.continuation=tail` keeps V_alpha alone: since V_alpha(z_{t+1}) already
counts log pi_e of the logged next action (E_b log pi_e, Jensen's lower bound of
the one-step term's log E_b pi_e), it is the same factor without pi_e's forward
and backward per guided step, at the cost of an MLP.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from adwm.data.datamodule import TrajectoryDataModule
from adwm.guidance.config import TailConfig
from adwm.policies.base import AgentState
from adwm.policies.config import PolicyConfig, score_key
from adwm.policies.llm import LLMPolicy
from adwm.policies.sampling import action_log_probs
from adwm.policies.wrappers import eps_mixture


class TailValue(nn.Module):
    def __init__(self, d_latent_flat: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_latent_flat, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z.flatten(1)).squeeze(-1)


def fit_tail_value(
    world_model: Any,
    policy_cfg: PolicyConfig,
    llm_policy: LLMPolicy | None,
    dm: TrajectoryDataModule,
    cfg: TailConfig,
    seed: int,
    score_cache: dict | None = None,
) -> TailValue:
    """TD(0) fit of V(z_t) = log pi_e(a_t | o_t) + gamma (1 - done_t) V(z_{t+1}) on logged transitions.

    `score_cache` keeps the agent's text scores of the sampled states per checkpoint: they do not
    depend on temperature or eps, so an eps family scores them once."""
    rng = np.random.default_rng(seed)
    writing = llm_policy is not None and policy_cfg.mode == "generate"
    if writing:  # log pi_e(a|o) is the probability of writing a; the uniform branch needs the logged list
        items = [x for x in dm.train_items if policy_cfg.eps == 0 or x["admissible"]]
    else:
        items = [x for x in dm.train_items if x["admissible"] and x["action"] in x["admissible"]]
    if not items:
        raise ValueError(f"{dm.cfg.log}: no logged transition to fit the continuation tail value on")
    items = [items[i] for i in rng.permutation(len(items))[: cfg.transitions]]
    states = [
        AgentState(
            dm.tasks[x["task"]],
            dm.observations[x["history_obs"][-1]],
            [],
            [dm.actions[a] for a in x["admissible"]] if x["admissible"] else None,
        )
        for x in items
    ]
    if writing:
        reward = torch.tensor(
            _writing_log_probs(llm_policy, policy_cfg, states, [dm.actions[x["action"]] for x in items])
        )
    else:
        reward = _choice_log_probs(llm_policy, policy_cfg, states, items, score_cache)
    z = world_model.encode([dm.observations[x["history_obs"][-1]] for x in items]).flatten(1)
    z_next = world_model.encode([dm.observations[x["next_obs"]] for x in items]).flatten(1)
    done = torch.tensor([float(x["done"]) for x in items], device=z.device)
    reward = reward.to(z.device)
    torch.manual_seed(seed)
    value = TailValue(z.size(1)).to(z.device)  # the world model's device (evaluate.device)
    target = copy.deepcopy(value).requires_grad_(False)
    opt = torch.optim.Adam(value.parameters(), lr=cfg.lr)
    for step in range(cfg.steps):
        with torch.no_grad():
            y = reward + cfg.gamma * (1 - done) * target(z_next)
        loss = nn.functional.mse_loss(value(z), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % cfg.target_every == 0:
            target.load_state_dict(value.state_dict())
    return value.eval().requires_grad_(False)


def _choice_log_probs(
    llm_policy: LLMPolicy | None,
    policy_cfg: PolicyConfig,
    states: Sequence[AgentState],
    items: list[dict],
    score_cache: dict | None,
) -> torch.Tensor:
    """log pi_e(a|o) of each logged action for an agent that chooses from the admissible list."""
    key = ("logged", score_key(policy_cfg))
    if llm_policy is None:
        scores = [np.zeros(len(s.admissible)) for s in states]
    elif score_cache is not None and key in score_cache:
        scores = score_cache[key]
    else:
        scores = llm_policy.action_scores(states)
        if score_cache is not None:
            score_cache[key] = scores
    return torch.tensor(
        [
            float(action_log_probs(torch.as_tensor(sc), policy_cfg)[x["admissible"].index(x["action"])])
            for sc, x in zip(scores, items)
        ],
        dtype=torch.float32,
    )


def _writing_log_probs(
    llm_policy: LLMPolicy, policy_cfg: PolicyConfig, states: Sequence[AgentState], actions: Sequence[str]
) -> np.ndarray:
    """log pi_e(a|o) of each logged action for a writing agent: (1 - eps) p_gen(a) + eps 1[a in A] / |A|,
    floored at log 1e-6 (an action it would never write gives a large negative per-step value, not -inf)."""
    base = eps_mixture(llm_policy.generation_log_probs(states, actions), states, actions, policy_cfg.eps)
    return np.maximum(base, np.log(1e-6)).astype(np.float32)


class Continuation:
    """Builds log C(z0) for one simulated step of a batch of rollouts."""

    def __init__(self, world_model: Any, reader: Any, tail: TailValue | None, form: str = "full") -> None:
        """`world_model`: a `models.world_model.WorldModel` (the models layer sits above this one); `reader`: a
        `simulation.readers.LatentReader` or None for a policy that never reads its model; `form`: "full"
        (the one-step term plus `tail`) or "tail" (`tail` alone: no agent forward; `tail` is then needed)."""
        if form == "tail" and tail is None:
            raise ValueError(
                "guidance.continuation=tail: log C is the tail value, which evaluate.tail.enabled=false turns off"
            )
        self.wm, self.reader, self.tail, self.form = world_model, reader, tail, form

    def log_c(
        self,
        context_after: Callable[[torch.Tensor], torch.Tensor],
        next_sets: Callable[[torch.Tensor, list[int]], torch.Tensor],
        tasks: list[str],
        policy_cfg,
        live: list[int] | None = None,
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        """log C as a function of z0 (B, L, d) -> (B,); rows outside `live` (finished rollouts) get 0
        and so no guidance, and cost nothing. `next_sets(z0[live], live)` gives the candidate sets (B', V)
        of the next states, by the simulation's rule (not differentiated)."""
        wm = self.wm
        live = list(range(len(tasks))) if live is None else live

        def scattered(log_c: torch.Tensor, z0: torch.Tensor) -> torch.Tensor:
            where = (torch.tensor(live, device=log_c.device),)
            return torch.zeros(z0.size(0), dtype=log_c.dtype, device=log_c.device).index_put(where, log_c)

        if self.form == "tail":
            return lambda z0: scattered(self.tail(z0[live]), z0)

        def fn(z0: torch.Tensor) -> torch.Tensor:
            nxt = next_sets(z0.detach()[live], live)
            ids = [torch.nonzero(row).flatten() for row in nxt]
            texts = [[wm.actions[j] for j in row.tolist()] for row in ids]
            behaviour = wm.heads.behaviour_logits(context_after(z0)[live], wm.vocab_embeddings())  # (B', V)
            if self.reader is not None:
                scores = self.reader.scores(z0[live], [tasks[i] for i in live], texts)
            else:
                scores = [torch.zeros(len(t), device=z0.device) for t in texts]
            out = []
            for k, row in enumerate(ids):
                log_b = torch.log_softmax(behaviour[k, row], dim=-1).double()
                log_pi = action_log_probs(scores[k].to(log_b.device), policy_cfg)
                out.append(torch.logsumexp(log_b + log_pi, dim=-1))
            log_c = torch.stack(out).float()
            if self.tail is not None:
                log_c = log_c + self.tail(z0[live])
            return scattered(log_c, z0)

        return fn
