"""World-model validation metrics that torchmetrics does not provide."""

from __future__ import annotations

import torch


def effective_rank(x: torch.Tensor) -> torch.Tensor:
    """exp(entropy) of the normalised singular values of centred x (Roy & Vetterli 2007); (N, D) -> scalar."""
    s = torch.linalg.svdvals(x - x.mean(0))
    p = s / s.sum().clamp(min=1e-12)
    return torch.exp(-(p * torch.log(p.clamp(min=1e-12))).sum())


def retrieval_top1(samples: torch.Tensor, truths: torch.Tensor, ids: torch.Tensor, n: int) -> torch.Tensor:
    """One-step retrieval: in each group of n steps, is a sample's nearest true next latent its own?

    samples, truths (B, L, d); ids (B,) next-observation ids: a candidate with the same next
    observation text as the right one counts as right (it is the same state). Returns the hit rate
    over the first (B // n) * n steps.
    """
    hits = []
    for start in range(0, samples.size(0) - n + 1, n):
        s = samples[start : start + n].flatten(1)
        t = truths[start : start + n].flatten(1)
        nearest = torch.cdist(s, t).argmin(-1)  # (n,)
        group = ids[start : start + n]
        hits.append((group[nearest] == group).float())
    return torch.cat(hits).mean()


def set_metrics(pred: torch.Tensor, true: torch.Tensor) -> dict[str, torch.Tensor]:
    """Predicted vs true sets as multi-hot rows (B, V): micro recall and precision, the ratio of
    total set sizes (1 = right size) and the share of rows predicted exactly."""
    hit = (pred & true).sum()
    return {
        "recall": hit / true.sum().clamp(min=1),
        "precision": hit / pred.sum().clamp(min=1),
        "size_ratio": pred.sum() / true.sum().clamp(min=1),
        "exact": (pred == true).all(-1).float().mean(),
    }
