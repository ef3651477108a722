"""The world model's training objectives, one named function per term.

`world_model_step` composes them in a fixed order (the random draws of the diffusion term and the
token decoder come in that order, so a seed gives the same fit). Collapse guard, five parts (a
constant latent would make the diffusion loss trivial):
1. diffusion targets come from an EMA copy of the encoder (BYOL-style stop-gradient);
2. a contrastive dynamics term (CPC, van den Oord et al. 2018): a point prediction of z_{t+1} from
   (c_t, a_t) must pick the true next observation out of every observation of the batch;
3. a latent-conditioned n-gram reconstruction of the text (models/token_decoder.py), so each state word
   is recoverable from the latent, not only the last action's feedback sentence;
4. the online encoder must support reward, termination, inverse dynamics and admissible-action
   prediction, which need distinct latents for states with distinct futures;
5. VICReg terms: a variance hinge keeps every latent dimension's batch std near 1 and an optional
   covariance penalty decorrelates dimensions; latent tokens are layer-normalised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from adwm.diffusion.schedules import q_sample, to_x0_eps, training_target
from adwm.models.token_decoder import token_ids
from adwm.models.world_model.latents import near_view

LOSS_WEIGHTS = {  # loss term -> the WorldModelConfig weight that scales it (the diffusion term has weight 1)
    "reward": "w_reward",
    "done": "w_done",
    "posterior": "w_posterior",
    "behaviour": "w_behaviour",
    "proposal": "w_proposal",
    "next_proposal": "w_next_proposal",
    "contrastive": "w_contrastive",
    "tokens": "w_tokens",
    "variance": "w_variance",
    "covariance": "w_covariance",
}


def diffusion_loss(
    wm, x0: torch.Tensor, c: torch.Tensor, a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Denoising loss on the target latent x0 (B, L, d) of o_{t+1}; the action is dropped with probability
    p_uncond (one network is the prior and the conditional). Returns (loss, x_t, denoiser output, t)."""
    b = x0.size(0)
    drop = torch.rand(b, device=x0.device) < wm.cfg.p_uncond
    a_cond = torch.where(drop[:, None], wm.null_action.expand(b, -1), a)
    t = torch.randint(0, wm.cfg.sampler.train_steps, (b,), device=x0.device)
    noise = torch.randn_like(x0)
    x_t = q_sample(x0, noise, wm.abar[t])
    out = wm.denoiser(x_t, t, torch.cat([c, a_cond], dim=-1))
    return F.mse_loss(out, training_target(x0, noise, wm.abar[t], wm.cfg.prediction)), x_t, out, t


def proposal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Plain mean BCE of the admissible-action head (per-action normalisation did worse: decisions.md)."""
    return F.binary_cross_entropy_with_logits(logits, target)


def contrastive_loss(pred: torch.Tensor, keys: torch.Tensor, target: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE of predictions (B, D) against the batch's distinct observation latents (U, D); the right key
    of row i is `target[i]`. Texts in a batch are distinct, so there are no false negatives."""
    logits = F.normalize(pred, dim=-1) @ F.normalize(keys, dim=-1).T / temperature
    return F.cross_entropy(logits, target)


def variance_covariance(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """VICReg (Bardes et al. 2022) variance hinge and covariance penalty of a batch of flat latents (N, D)."""
    if x.size(0) < 2:
        return x.sum() * 0, x.sum() * 0
    var = F.relu(1 - x.std(0)).mean()
    xc = x - x.mean(0)
    cov = xc.T @ xc / (x.size(0) - 1)  # (D, D)
    off = cov - torch.diag(torch.diag(cov))
    return var, off.pow(2).sum() / x.size(1)


def step_latents(wm, batch: dict, frozen: bool) -> tuple:
    """Online and target latents of the batch's texts, with the indices into them. Frozen: one cached
    latent space and the whole window; joint: only the texts near the transition are encoded."""
    texts, hist, next_obs, task = batch["texts"], batch["history_obs"], batch["next_obs"], batch["task"]
    if frozen:
        z = z_target = wm._cached_latents(texts)
    else:
        texts, hist, next_obs, task = near_view(texts, hist, next_obs, task, wm.cfg.joint_window)
        z = wm.encoder(texts)  # (U, L, d) online
        with torch.no_grad():
            z_target = wm.target_encoder(texts)
    return texts, hist, next_obs, task, z, z_target


def head_losses(wm, batch: dict, s: dict, frozen: bool) -> dict[str, torch.Tensor]:
    """Reward, termination, inverse dynamics, behaviour prior and the two proposal heads (computed in this
    order: autograd accumulates gradients in the order the graph was built).

    Simulation reads target-encoder latents only, so the context and the transition heads train on them;
    the online encoder is shaped by the same heads on its own latents. With `heads_on_denoised` the
    transition heads also read the denoiser's Tweedie estimate of z_{t+1} at the sampled noise level (no
    gradient into the denoiser), since sampled latents are less sharp than encoded ones."""
    cfg, vocab, a, a_id, c, c_sim = wm.cfg, s["vocab"], s["a"], s["a_id"], s["c"], s["c_sim"]
    out: dict[str, torch.Tensor] = {}
    z_next = s["z"][s["next_obs"]]
    rows_z, rows_c = ([s["x0"]], [c_sim]) if frozen else ([z_next, s["x0"]], [c, c_sim])
    if cfg.heads_on_denoised:
        rows_z.append(to_x0_eps(s["x_t"], s["out"], wm.abar[s["t"]], cfg.prediction)[0].detach())
        rows_c.append(c_sim)
    k = len(rows_z)
    heads_z, heads_c, heads_a = torch.cat(rows_z), torch.cat(rows_c), a.repeat(k, 1)
    reward, done_logit = wm.heads.transition(heads_z, heads_c, heads_a)
    out["reward"] = F.mse_loss(reward, batch["reward"].repeat(k))
    out["done"] = F.binary_cross_entropy_with_logits(done_logit, batch["done"].repeat(k))
    s["post"] = wm.heads.action_posterior(z_next, c, vocab)  # (B, V)
    out["posterior"] = F.cross_entropy(s["post"], a_id)
    contexts = [c_sim] if frozen else [c, c_sim]  # one context once the encoder is frozen
    behaviour = wm.heads.behaviour_logits(torch.cat(contexts), vocab)  # (kB, V)
    out["behaviour"] = F.cross_entropy(behaviour, a_id.repeat(len(contexts)))
    has, o_t = batch["has_admissible"], s["hist"][:, -1]
    s["prop"] = prop = wm.heads.proposal_logits(s["z"][o_t], vocab)  # (B, V) for o_t
    prop_sim = prop if frozen else wm.heads.proposal_logits(s["z_target"][o_t], vocab)  # as simulation reads it
    if has.any():
        adm = batch["admissible"][has].float()
        out["proposal"] = (proposal_loss(prop[has], adm) + proposal_loss(prop_sim[has], adm)) / 2
    else:
        out["proposal"] = prop.sum() * 0
    both = (has & batch["has_next_admissible"]).repeat(k)
    nxt = wm.heads.next_proposal_logits(heads_z, heads_c, heads_a, batch["admissible"].repeat(k, 1), vocab)
    if both.any():
        out["next_proposal"] = F.binary_cross_entropy_with_logits(
            nxt[both], batch["next_admissible"].repeat(k, 1)[both].float()
        )
    else:
        out["next_proposal"] = nxt.sum() * 0
    return out


def latent_guards(wm, s: dict, frozen: bool) -> dict[str, torch.Tensor]:
    """Token reconstruction (joint phase only), contrastive dynamics and the VICReg terms."""
    n_obs = int(s["task"].min())  # texts are the batch's observations, then its tasks
    flat = s["z"][:n_obs].flatten(1)  # the guards act on observation latents; task texts only feed the context
    if wm.cfg.w_tokens > 0 and not frozen:
        ids = token_ids(s["texts"][:n_obs], wm.encoder.tokenizer, wm._ids)
        tokens = wm.token_decoder.loss(s["z"][:n_obs], ids, wm.cfg.token_positions)
    else:
        tokens = flat.sum() * 0
    nce = contrastive_loss(wm.heads.predict_next(s["c"], s["a"]), flat, s["next_obs"], wm.cfg.temperature)
    var, cov = variance_covariance(flat)
    return {"tokens": tokens, "contrastive": nce, "variance": var, "covariance": cov}


def world_model_step(wm, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict]:
    """Every objective on one batch -> (total loss, detached loss terms, tensors validation reads)."""
    frozen = bool(wm.encoder_frozen)
    texts, hist, next_obs, task, z, z_target = step_latents(wm, batch, frozen)
    acts = batch["history_actions"]
    vocab = wm.vocab_embeddings()  # (V, d_a)
    noise = wm.cfg.context_noise if wm.training else 0.0
    c_sim = wm.context(z_target, hist, acts, vocab, task, noise)  # (B, D): what simulation conditions on
    c = c_sim if frozen else wm.context(z, hist, acts, vocab, task)  # (B, D) from online latents
    a_id = acts[:, -1]
    a = vocab[a_id]  # (B, d_a)
    x0 = z_target[next_obs]  # (B, L, d)
    loss_diff, x_t, out, t = diffusion_loss(wm, x0, c_sim, a)
    s = dict(texts=texts, hist=hist, next_obs=next_obs, task=task, z=z, z_target=z_target, vocab=vocab)
    s.update(c_sim=c_sim, c=c, a_id=a_id, a=a, x0=x0, x_t=x_t, out=out, t=t)
    terms = {"denoise": loss_diff, **head_losses(wm, batch, s, frozen), **latent_guards(wm, s, frozen)}
    loss = loss_diff
    for name, weight in LOSS_WEIGHTS.items():
        loss = loss + getattr(wm.cfg, weight) * terms[name]
    logs = {"loss": loss.detach(), **{f"loss_{k}": v.detach() for k, v in terms.items()}}
    extra = {
        "z": z.detach(),
        "z_target": z_target,
        "c": c_sim.detach(),
        "next_obs": next_obs,  # index of o_{t+1} into z
        "a": a.detach(),
        "vocab": vocab.detach(),
        "post": s["post"].detach(),
        "prop": s["prop"].detach(),
    }
    return loss, logs, extra
