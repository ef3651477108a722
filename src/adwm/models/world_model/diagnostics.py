"""World-model validation metrics: torchmetrics where it has them; effective rank, one-step retrieval and
candidate-set metrics, which it does not, written here."""

from __future__ import annotations

import torch
from torchmetrics.functional import mean_absolute_error
from torchmetrics.functional.classification import binary_accuracy, multiclass_accuracy


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


@torch.no_grad()
def validation_metrics(wm, batch: dict, batch_idx: int, x: dict) -> tuple[dict[str, torch.Tensor], tuple | None]:
    """Held-out metrics of one batch from `model_step`'s tensors `x`: the sampled next latent's reward,
    termination and candidate set, the heads' accuracy, latent spread, and (name, value, weight) of the
    one-step retrieval metric when the batch holds enough steps (else None)."""
    n = batch["reward"].numel()
    metrics: dict[str, torch.Tensor] = {}
    gen = torch.Generator().manual_seed(batch_idx)
    z_hat = wm.sample_next(x["c"], x["a"], gen)  # (B, L, d) sampled next latents
    reward_hat, done_hat = wm.heads.transition(z_hat, x["c"], x["a"])
    both = batch["has_admissible"] & batch["has_next_admissible"]
    if both.any():  # candidate set of the sampled next state, from the true current set
        nxt = wm.heads.next_proposal_logits(z_hat, x["c"], x["a"], batch["admissible"], x["vocab"])
        sets = set_metrics(nxt[both] > 0, batch["next_admissible"][both])
        metrics.update({f"val/next_proposal_{k}": v for k, v in sets.items()})
    metrics["val/reward_mae"] = mean_absolute_error(reward_hat, batch["reward"])
    metrics["val/done_acc"] = binary_accuracy(torch.sigmoid(done_hat), batch["done"].long())  # logit > 0
    a_logged = batch["history_actions"][:, -1]
    metrics["val/posterior_top1"] = multiclass_accuracy(x["post"], a_logged, x["post"].size(-1), average="micro")
    has = batch["has_admissible"]
    if has.any():
        sets = set_metrics(x["prop"][has] > 0, batch["admissible"][has])
        metrics.update({f"val/proposal_{k}": v for k, v in sets.items()})
    flat = x["z"].flatten(1)
    metrics["val/latent_std_mean"] = flat.std(0).mean()
    metrics["val/latent_std_min"] = flat.std(0).min()
    metrics["val/latent_effective_rank"] = effective_rank(flat)
    k = wm.cfg.retrieval_candidates
    retrieval = None
    if n >= k:
        hits = retrieval_top1(z_hat, x["z_target"][x["next_obs"]], batch["next_obs_id"], k)
        retrieval = (f"val/retrieval_top1_n{k}", hits, (n // k) * k)
    return metrics, retrieval
