"""The one sampling rule of an agent over a candidate set, written once in torch (differentiable) and used
by every caller: the agents acting in the real environment, the simulator, continuation guidance and the
off-policy baselines. A drift between two copies would bias one side silently.

    pi(a | s) = (1 - eps) * softmax(score(a) / T) + eps / |A(s)|

with T = 0 meaning uniform over the argmax set, and `score(a)` the agent's summed token log-likelihood
of the action. Computed in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from adwm.policies.config import PolicyConfig


def uses_model(policy: PolicyConfig) -> bool:
    """Whether the policy consults its LLM at all (a uniform policy or eps = 1 never does)."""
    return policy.kind == "llm" and policy.eps < 1.0


def mix_uniform(base: torch.Tensor, uniform: torch.Tensor, eps: float) -> torch.Tensor:
    """log((1 - eps) exp(base) + eps exp(uniform)): the epsilon mixture in log space."""
    if eps <= 0.0:
        return base
    if eps >= 1.0:
        return uniform
    return torch.logaddexp(math.log1p(-eps) + base, math.log(eps) + uniform)


def candidate_log_probs(scores: torch.Tensor, temperature: float, eps: float = 0.0) -> torch.Tensor:
    """Log-probabilities (float64) over one candidate set from the agent's scores (n,)."""
    n = scores.numel()
    uniform = torch.full((n,), -float(np.log(n)), dtype=torch.float64)
    if eps >= 1.0:
        return uniform
    s = scores.double()
    if temperature == 0:
        best = s == s.max()
        base = torch.where(best, -torch.log(best.sum().double()), torch.tensor(-float("inf"), dtype=torch.float64))
    else:
        base = torch.log_softmax(s / temperature, dim=-1)
    return mix_uniform(base, uniform, eps)


def action_log_probs(scores: torch.Tensor, policy: PolicyConfig) -> torch.Tensor:
    """`candidate_log_probs` with the policy's temperature and eps (uniform for a policy that never reads
    its model)."""
    if not uses_model(policy):
        return candidate_log_probs(scores, 0.0, 1.0)
    return candidate_log_probs(scores, policy.temperature, policy.eps)


def log_probs_np(scores: np.ndarray, temperature: float, eps: float = 0.0) -> np.ndarray:
    """`candidate_log_probs` for numpy callers."""
    return candidate_log_probs(torch.from_numpy(np.asarray(scores, dtype=np.float64)), temperature, eps).numpy()


def mix_uniform_np(base: np.ndarray, uniform: np.ndarray, eps: float) -> np.ndarray:
    """`mix_uniform` for numpy callers."""
    return mix_uniform(
        torch.from_numpy(np.asarray(base, dtype=np.float64)),
        torch.from_numpy(np.asarray(uniform, dtype=np.float64)),
        eps,
    ).numpy()
