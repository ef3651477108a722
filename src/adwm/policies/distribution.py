"""An agent's distribution over one candidate set from its action scores, as torch ops (differentiable)."""

from __future__ import annotations

import numpy as np
import torch

from adwm.policies.llm import PolicyConfig


def uses_model(policy: PolicyConfig) -> bool:
    """Whether the policy consults its LLM at all (a uniform policy or eps = 1 never does)."""
    return policy.kind == "llm" and policy.eps < 1.0


def action_log_probs(scores: torch.Tensor, policy: PolicyConfig) -> torch.Tensor:
    """The agent's log-probabilities over one candidate set from its summed log-likelihood scores:
    softmax(scores / T) (uniform over the argmax set at T = 0), mixed with eps uniform."""
    n = scores.numel()
    uniform = torch.full((n,), -float(np.log(n)), dtype=torch.float64)
    if not uses_model(policy):
        return uniform
    s = scores.double()
    if policy.temperature == 0:
        best = s == s.max()
        base = torch.where(best, -torch.log(best.sum().double()), torch.tensor(-float("inf"), dtype=torch.float64))
    else:
        base = torch.log_softmax(s / policy.temperature, dim=-1)
    if policy.eps <= 0.0:
        return base
    return torch.logaddexp(np.log1p(-policy.eps) + base, np.log(policy.eps) + uniform)
