"""`WorldModelModule`: jointly trained text encoder + latent diffusion dynamics + heads.

Collapse guard (a constant latent makes the diffusion loss trivial), five parts:
1. diffusion targets come from an EMA copy of the encoder (BYOL-style stop-gradient), so the
   online encoder cannot lower the diffusion loss by moving the targets;
2. a contrastive dynamics term (CPC, van den Oord et al. 2018): a point prediction of z_{t+1}
   from (c_t, a_t) must pick the true next observation out of every observation of the batch,
   including o_t itself, so states with different futures are pushed apart;
3. a latent-conditioned n-gram reconstruction of the text (models/token_decoder.py): contrastive pairs
   can be told apart by the last action's feedback sentence alone, and then the room or a
   door's state is never read (measured: a room change moved the latent 0.05 against 16 between
   random observations); predicting every token from the latent and its left context makes
   each state word recoverable from the latent;
4. the online encoder must support reward, termination, inverse dynamics and admissible-action
   prediction, which need distinct latents for states with distinct futures;
5. VICReg terms: a variance hinge keeps every latent dimension's batch std near 1 and an
   optional covariance penalty decorrelates dimensions; latent tokens are layer-normalised, so
   the scale cannot shrink.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict, dataclass, field

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from adwm.diffusion.denoiser import Denoiser, DenoiserConfig
from adwm.diffusion.sampler import DiffusionSampler, SamplerConfig
from adwm.diffusion.schedules import alpha_bar, q_sample, to_x0_eps, training_target
from adwm.encoders.base import EncoderConfig
from adwm.encoders.registry import build_encoder
from adwm.models.action_encoder import ActionEncoder
from adwm.models.heads import Heads
from adwm.models.history import HistoryEncoder
from adwm.models.metrics import effective_rank, retrieval_top1, set_metrics
from adwm.models.proposal_bank import ProposalBank
from adwm.models.token_decoder import TokenDecoder, token_ids

# Lightning notes that the module's `transfer_batch_to_device` (a no-op on the CPU) wins over the datamodule's
warnings.filterwarnings("ignore", message=".*overridden `transfer_batch_to_device`.*")

PROPOSALS = ("head", "retrieval")


@dataclass
class WorldModelConfig:
    d_action: int = 64
    d_context: int = 128
    history_layers: int = 2
    p_uncond: float = 0.1  # action dropped this often: one network is both prior and conditional (CFG)
    prediction: str = "v"  # v-prediction is well conditioned at every noise level
    lr: float = 2e-3
    weight_decay: float = 0.0
    ema_decay: float = 0.99  # target encoder for diffusion targets
    w_reward: float = 1.0
    w_done: float = 0.5
    w_posterior: float = 0.5
    w_behaviour: float = 0.5
    w_proposal: float = 0.5
    w_next_proposal: float = 0.5
    w_contrastive: float = 1.0
    w_tokens: float = 10.0  # latent-conditioned n-gram reconstruction of the text: no state word can be ignored
    joint_window: int = 2  # history observations read while the encoder trains (all of data.history after)
    token_context: int = 3  # tokens of left context the decoder sees besides the latent
    token_positions: int = 24  # positions predicted per text and step
    token_classes: int = 2048  # token ids are predicted modulo this (MiniLM's 30k vocabulary would cost 15x)
    temperature: float = 0.1  # of the contrastive term's cosine logits
    w_variance: float = 1.0
    w_covariance: float = (
        0.0  # VICReg covariance term: raises effective rank (~3 -> ~20) but, measured, slows retrieval; off
    )
    heads_on_denoised: bool = True  # transition heads also train on the denoiser's Tweedie estimate of z_{t+1}
    # Max std of Gaussian noise added in training to the history latents that condition the dynamics and
    # heads (drawn per transition from U(0, context_noise); latents have ~unit std per dimension), so they
    # learn to read histories of sampled latents. Measured over the three demo seeds with 0.5: estimates
    # moved up (iter3 at eps 0: 0.371 / 0.334 / 0.557 against 0.324 / 0.317 / 0.449, live 0.443 / 0.476 /
    # 0.492), nRMSE 0.28 / 0.24 / 0.32 against 0.33 / 0.33 / 0.26, Spearman 0.71 / 0.96 / 0.86 against
    # 0.86 / 0.96 / 0.86 (seed 0: iter1 over-estimated); not a clear gain, so off by default.
    context_noise: float = 0.0
    # Observation latents the history reads: the episode's first and the last `history_latents` (0: every
    # one in the window); the others keep their action and read a learned "not read" token. In simulation
    # every latent after the first is sampled, so a history that reads them all compounds their error.
    # Measured with 1 on the seed-0 demo (same log and budget): held-out episodes replayed open loop were
    # better calibrated (simulated return 0.273 against 0.271 logged, per-episode correlation 0.68; with 0,
    # 0.314 and 0.44), but the agents' estimates were more compressed (iter3 at eps 0 / eps 1: 0.331 / 0.213
    # against 0.406 / 0.247 with 0, live 0.443 / 0.176), so every latent is read by default.
    history_latents: int = 0
    retrieval_candidates: int = 32  # N of the one-step retrieval metric
    proposal: str = "head"  # head: learned, nearest-logged-state retrieval where it proposes nothing | retrieval
    denoiser: DenoiserConfig = field(default_factory=DenoiserConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)


class WorldModelModule(L.LightningModule):
    def __init__(
        self,
        encoder: dict,
        world_model: dict,
        window: int,
        actions: list[str],
        texts: list[str] | None = None,
        tokenizer_json: str | None = None,
    ) -> None:
        super().__init__()
        enc_cfg = EncoderConfig(**encoder)
        wm = world_model if isinstance(world_model, WorldModelConfig) else _wm_config(world_model)
        _check_proposal(wm.proposal)
        self.cfg, self.actions = wm, list(actions)
        self.proposal_bank: ProposalBank | None = None  # built after training, saved in the checkpoint
        self.encoder = build_encoder(enc_cfg, texts, tokenizer_json)
        if tokenizer_json is None and enc_cfg.name == "tiny":
            tokenizer_json = self.encoder.tokenizer.backend_tokenizer.to_str()
        self.save_hyperparameters(
            {
                "encoder": asdict(enc_cfg),
                "world_model": asdict(wm),
                "window": window,
                "actions": self.actions,
                "tokenizer_json": tokenizer_json,
            }
        )
        self.target_encoder = copy.deepcopy(self.encoder).requires_grad_(False)
        n, d = enc_cfg.n_latents, enc_cfg.d_latent
        self.action_encoder = ActionEncoder(self.encoder.tokenizer, wm.d_action)
        self.history = HistoryEncoder(n, d, wm.d_action, wm.d_context, window, wm.history_layers, wm.history_latents)
        self.null_action = nn.Parameter(torch.zeros(wm.d_action))
        self.denoiser = Denoiser(wm.denoiser, n, d, wm.d_context + wm.d_action)
        self.heads = Heads(n * d, wm.d_context, wm.d_action)
        self.token_decoder = TokenDecoder(n * d, min(len(self.encoder.tokenizer), wm.token_classes), wm.token_context)
        self._ids: dict[str, torch.Tensor] = {}  # token ids per observation text, for the token decoder
        self.sampler = DiffusionSampler(wm.sampler)
        self.register_buffer("abar", alpha_bar(wm.sampler.schedule, wm.sampler.train_steps).float(), persistent=False)
        flat, offsets = self.action_encoder.token_ids(self.actions)  # tokenised once, embedded every step
        self.register_buffer("vocab_ids", flat, persistent=False)
        self.register_buffer("vocab_offsets", offsets, persistent=False)
        self.register_buffer("proposal_threshold", torch.zeros(()))  # logit cut of the head; set by calibration
        self.register_buffer("next_proposal_threshold", torch.zeros(()))  # the edit head's cut; set by calibration
        self.register_buffer("encoder_frozen", torch.zeros((), dtype=torch.bool))  # set by `freeze_encoder`
        self._latents: dict[str, torch.Tensor] = {}  # text -> latent once the encoder is frozen

    # -- pieces ------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        """Latents (N, L, d) of observation texts in the space the diffusion model samples in
        (the EMA target encoder's): simulation starts from these and the proposal bank holds them.
        Each distinct text is encoded once; once the encoder is frozen (or never trains) its latents are
        cached, so the proposal bank, calibration, projector and baselines do not re-encode the logs
        (a pretrained encoder runs ~75 texts/s on 2 cores)."""
        if bool(self.encoder_frozen) or not self.encoder.cfg.trainable:
            return self._cached_latents(texts, batch_size)
        distinct = list(dict.fromkeys(texts))
        z = self._encode_distinct(distinct, batch_size)
        where = {t: i for i, t in enumerate(distinct)}
        return z[torch.tensor([where[t] for t in texts], dtype=torch.long)]

    def _encode_distinct(self, texts: list[str], batch_size: int) -> torch.Tensor:
        if not texts:
            n, d = self.encoder.cfg.n_latents, self.encoder.cfg.d_latent
            return torch.zeros(0, n, d, device=self.device)
        return torch.cat([self.target_encoder(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)])

    def freeze_encoder(self) -> None:
        """Second fit phase: the encoder stops training, the target encoder becomes an exact copy of it,
        and latents are computed once per distinct text and cached. Every later step trains only the
        dynamics and heads, at a small fraction of a joint step's cost (the encoder is most of it)."""
        if not bool(self.encoder_frozen):
            self.target_encoder.load_state_dict(self.encoder.state_dict())
            self.encoder_frozen.fill_(True)
        self.encoder.requires_grad_(False)
        self._latents.clear()

    @torch.no_grad()
    def _cached_latents(self, texts: list[str], batch_size: int = 256) -> torch.Tensor:
        missing = [t for t in dict.fromkeys(texts) if t not in self._latents]
        if missing:
            was = self.target_encoder.training
            self.target_encoder.eval()
            for text, z in zip(missing, self._encode_distinct(missing, batch_size)):
                self._latents[text] = z
            self.target_encoder.train(was)
        if not texts:
            return self._encode_distinct([], batch_size)
        return torch.stack([self._latents[t] for t in texts])

    def vocab_embeddings(self) -> torch.Tensor:
        """(V, d_a) embeddings of the logged action vocabulary."""
        return self.action_encoder.embed(self.vocab_ids, self.vocab_offsets)

    def context(
        self,
        z: torch.Tensor,
        hist: torch.Tensor,
        acts: torch.Tensor,
        vocab: torch.Tensor,
        task: torch.Tensor,
        noise: float = 0.0,
    ) -> torch.Tensor:
        """c_t from latents z (U, L, d), history indices (B, W), action ids (B, W; last = a_t) and
        task indices (B,) into z. `noise` > 0: the history latents get Gaussian noise of a standard
        deviation drawn per row from U(0, noise) (training only, `world_model.context_noise`)."""
        mask = hist >= 0
        z_hist = z[hist.clamp(min=0)]  # (B, W, L, d)
        if noise > 0:
            std = torch.rand(z_hist.size(0), device=z.device) * noise
            z_hist = z_hist + std.view(-1, 1, 1, 1) * torch.randn_like(z_hist)
        prev = acts[:, :-1]  # a_{k-1} for window positions 1..W-1
        prev_emb = vocab[prev.clamp(min=0)] * (prev >= 0)[..., None]  # (B, W-1, d_a)
        prev_emb = torch.cat([torch.zeros_like(prev_emb[:, :1]), prev_emb], dim=1)  # (B, W, d_a)
        return self.history(z_hist, prev_emb, mask, z[task])

    def denoise(self, z_t: torch.Tensor, t: torch.Tensor, c: torch.Tensor, a: torch.Tensor | None) -> torch.Tensor:
        """Denoiser output; a None (or the null embedding) gives the unconditional prior."""
        a = self.null_action.expand(c.size(0), -1) if a is None else a
        return self.denoiser(z_t, t, torch.cat([c, a], dim=-1))

    def eps(self, z_t: torch.Tensor, t: torch.Tensor, c: torch.Tensor, a: torch.Tensor | None) -> torch.Tensor:
        return to_x0_eps(z_t, self.denoise(z_t, t, c, a), self.abar[t], self.cfg.prediction)[1]

    @torch.no_grad()
    def sample_next(self, c: torch.Tensor, a: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """z_{t+1} ~ p(. | c, a) with the configured sampler (no guidance) -> (B, L, d)."""
        n, d = self.encoder.cfg.n_latents, self.encoder.cfg.d_latent
        return self.sampler.sample(lambda x, t: self.eps(x, t, c, a), (c.size(0), n, d), generator)

    # -- candidate actions ---------------------------------------------------------------
    def build_proposal_bank(self, texts: list[str], admissible: list[list[int]]) -> None:
        """Index logged states (texts, admissible action ids) for nearest-state retrieval."""
        self.proposal_bank = ProposalBank.build(self.encode(texts).flatten(1), admissible, len(self.actions), texts)

    @torch.no_grad()
    def calibrate_proposal(self, texts: list[str], admissible: list[list[int]]) -> float:
        """Set the head's logit threshold so that it proposes as many actions in total as were admissible
        on these logged states (an eps-greedy agent's random branch needs sets of the right size)."""
        logits = self.heads.proposal_logits(self.encode(texts), self.vocab_embeddings()).flatten()
        self.proposal_threshold.fill_(_cut_for_size(logits, sum(len(a) for a in admissible)))
        return float(self.proposal_threshold)

    @torch.no_grad()
    def calibrate_next_proposal(self, batches) -> float:
        """Set the edit head's logit threshold so that, on these logged transitions (collated batches),
        it proposes as many next actions in total as were admissible. Measured on the demo log: at the
        plain cut 0 it proposed 0.64 of the true set size (recall 0.58), rollouts lost the actions
        that make progress, and a uniform policy's simulated value fell to 0.06 against 0.16 live."""
        logits, sizes = [], 0
        vocab = self.vocab_embeddings()
        for batch in batches:
            both = batch["has_admissible"] & batch["has_next_admissible"]
            if not both.any():
                continue
            z = self.encode(batch["texts"])
            c = self.context(z, batch["history_obs"], batch["history_actions"], vocab, batch["task"])
            a = vocab[batch["history_actions"][:, -1]]
            nxt = self.heads.next_proposal_logits(z[batch["next_obs"]], c, a, batch["admissible"], vocab)
            logits.append(nxt[both].flatten())
            sizes += int(batch["next_admissible"][both].sum())
        if not logits:
            return float(self.next_proposal_threshold)
        self.next_proposal_threshold.fill_(_cut_for_size(torch.cat(logits), sizes))
        return float(self.next_proposal_threshold)

    @torch.no_grad()
    def propose(self, z: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        """Candidate actions (B, V) bool over the logged vocabulary for latent states z (B, L, d)."""
        mode = _check_proposal(mode or self.cfg.proposal)
        if mode == "retrieval":
            if self.proposal_bank is None:
                raise RuntimeError(
                    "world_model.proposal=retrieval: this world model has no proposal bank (fit builds it)"
                )
            return self.proposal_bank.lookup(z)
        sets = self.heads.proposal_logits(z, self.vocab_embeddings()) > self.proposal_threshold
        empty = ~sets.any(-1)
        if empty.any() and self.proposal_bank is not None:
            sets[empty] = self.proposal_bank.lookup(z[empty])
        return sets

    @torch.no_grad()
    def cap_candidates(self, z: torch.Tensor, sets: torch.Tensor, max_candidates: int) -> torch.Tensor:
        """Sets (B, V) of latent states z (B, L, d) cut to their `max_candidates` actions (0 = no cut) with
        the highest proposal-head scores: a logged first list can hold ~1000 valid actions (ScienceWorld)."""
        if not 0 < max_candidates < int(sets.sum(-1).max()):
            return sets
        logits = self.heads.proposal_logits(z, self.vocab_embeddings())
        top = logits.masked_fill(~sets, float("-inf")).topk(max_candidates, dim=-1).indices
        return sets & torch.zeros_like(sets).scatter_(1, top, True)

    @torch.no_grad()
    def propose_next(
        self,
        z_next: torch.Tensor,
        c: torch.Tensor,
        a: torch.Tensor,
        prev: torch.Tensor,
        max_candidates: int = 0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Candidate actions (B, V) bool of simulated next states, as an edit of the current sets prev (B, V);
        a row left empty falls back to `propose` on the state alone, then to the whole vocabulary. With
        `max_candidates` > 0 a larger set keeps its highest-scoring actions under the edit head: every
        candidate is scored by the agent each step, so an untrained head's whole-vocabulary sets would
        make simulation cost grow with the log's vocabulary (logged lists are far smaller: builtin <= 20).

        Without a generator the set is the calibrated cut of the edit head's logits. With one, the set is a
        draw: each action joins with the head's probability sigmoid(logit) that it is admissible, so an
        action the sampled latent leaves uncertain is offered some of the time rather than never."""
        logits = self.heads.next_proposal_logits(z_next, c, a, prev, self.vocab_embeddings())
        if generator is None:
            sets = logits > self.next_proposal_threshold
        else:
            sets = torch.rand(logits.shape, generator=generator) < torch.sigmoid(logits)
        empty = ~sets.any(-1)
        if empty.any():
            sets[empty] = self.propose(z_next[empty])
        sets[~sets.any(-1)] = True  # never an empty set: the whole logged vocabulary as the last resort
        if 0 < max_candidates < sets.size(-1):
            top = logits.masked_fill(~sets, float("-inf")).topk(max_candidates, dim=-1).indices
            sets = sets & torch.zeros_like(sets).scatter_(1, top, True)
        return sets

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.proposal_bank is not None:
            checkpoint["proposal_bank"] = self.proposal_bank.state_dict()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if bool(checkpoint["state_dict"].get("encoder_frozen", False)):
            self.encoder.requires_grad_(False)
        if "proposal_bank" in checkpoint:
            self.proposal_bank = ProposalBank.from_state_dict(checkpoint["proposal_bank"])

    # -- training ------------------------------------------------------------------------
    def model_step(self, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict]:
        cfg = self.cfg
        frozen = bool(self.encoder_frozen)
        texts, hist, next_obs, task = batch["texts"], batch["history_obs"], batch["next_obs"], batch["task"]
        acts = batch["history_actions"]
        if frozen:  # second phase: one latent space, cached; the whole history window is read
            z = z_target = self._cached_latents(texts)
        else:  # first phase: only the texts near the transition are encoded (see `_near_view`)
            texts, hist, next_obs, task = _near_view(texts, hist, next_obs, task, cfg.joint_window)
            z = self.encoder(texts)  # (U, L, d) online
            with torch.no_grad():
                z_target = self.target_encoder(texts)
        vocab = self.vocab_embeddings()  # (V, d_a)
        # Simulation reads target-encoder latents only (logged starts are encoded by it and sampled latents
        # live in its space), so the denoiser's context and the transition heads are trained on them too.
        # Measured after a 3-minute fit: online and target latents of one text lay 6.1 apart against 14.9
        # between random texts, so parts trained on online latents were read off their inputs in simulation.
        # The online encoder is shaped by the same heads on its own latents (and by the guards).
        # Simulation conditions on its own sampled latents, which lie off the logged ones (measured on the
        # seed-0 demo world model: ~5 from the true next latent and ~4 from the nearest logged one, where
        # logged neighbours are ~2.6 apart), and the error compounds over a rollout; `context_noise` trains
        # the dynamics and heads on noisy histories.
        noise = cfg.context_noise if self.training else 0.0
        c_sim = self.context(z_target, hist, acts, vocab, task, noise)  # (B, D) from target latents
        c = c_sim if frozen else self.context(z, hist, acts, vocab, task)  # (B, D) from online latents
        a_id = acts[:, -1]
        a = vocab[a_id]  # (B, d_a)

        # diffusion on the EMA target latent of o_{t+1}; the action is dropped with prob p_uncond
        x0 = z_target[next_obs]  # (B, L, d)
        b = x0.size(0)
        drop = torch.rand(b, device=x0.device) < cfg.p_uncond
        a_cond = torch.where(drop[:, None], self.null_action.expand(b, -1), a)
        t = torch.randint(0, cfg.sampler.train_steps, (b,), device=x0.device)
        noise = torch.randn_like(x0)
        x_t = q_sample(x0, noise, self.abar[t])
        out = self.denoiser(x_t, t, torch.cat([c_sim, a_cond], dim=-1))
        loss_diff = F.mse_loss(out, training_target(x0, noise, self.abar[t], cfg.prediction))

        # Transition heads: on the online o_{t+1} (shapes the encoder), on the target o_{t+1} (what
        # simulation starts from) and, with `heads_on_denoised`, on the denoiser's Tweedie estimate
        # E[z_{t+1} | z_k] at the sampled noise level (no gradient into the denoiser): sampled latents
        # are less sharp than encoded ones, and this teaches E[r | blurred latent, c, a] instead of
        # leaving the heads to extrapolate. Measured on held-out episodes replayed open loop (demo log,
        # 3-minute fit): without it the simulated reward per step was about half the logged one; with it
        # the mean is right, but a sampled latent the heads cannot read earns the average reward, which
        # every policy collects alike.
        z_next = z[next_obs]
        rows_z, rows_c = ([x0], [c_sim]) if frozen else ([z_next, x0], [c, c_sim])
        if cfg.heads_on_denoised:
            rows_z.append(to_x0_eps(x_t, out, self.abar[t], cfg.prediction)[0].detach())
            rows_c.append(c_sim)
        k = len(rows_z)
        heads_z, heads_c, heads_a = torch.cat(rows_z), torch.cat(rows_c), a.repeat(k, 1)
        reward, done_logit = self.heads.transition(heads_z, heads_c, heads_a)
        loss_r = F.mse_loss(reward, batch["reward"].repeat(k))
        loss_d = F.binary_cross_entropy_with_logits(done_logit, batch["done"].repeat(k))
        post = self.heads.action_posterior(z_next, c, vocab)  # (B, V)
        loss_post = F.cross_entropy(post, a_id)
        contexts = [c_sim] if frozen else [c, c_sim]  # one context once the encoder is frozen
        behaviour = self.heads.behaviour_logits(torch.cat(contexts), vocab)  # (kB, V)
        loss_beh = F.cross_entropy(behaviour, a_id.repeat(len(contexts)))
        has = batch["has_admissible"]
        o_t = hist[:, -1]
        prop = self.heads.proposal_logits(z[o_t], vocab)  # (B, V) for o_t
        prop_sim = prop if frozen else self.heads.proposal_logits(z_target[o_t], vocab)  # as simulation reads it
        loss_prop = (
            (
                self._proposal_loss(prop[has], batch["admissible"][has].float())
                + self._proposal_loss(prop_sim[has], batch["admissible"][has].float())
            )
            / 2
            if has.any()
            else prop.sum() * 0
        )
        both = has & batch["has_next_admissible"]
        both, adm = both.repeat(k), batch["admissible"].repeat(k, 1)
        nxt = self.heads.next_proposal_logits(heads_z, heads_c, heads_a, adm, vocab)
        loss_next = (
            F.binary_cross_entropy_with_logits(nxt[both], batch["next_admissible"].repeat(k, 1)[both].float())
            if both.any()
            else nxt.sum() * 0
        )
        n_obs = int(task.min())  # texts are the batch's observations, then its tasks
        flat = z[:n_obs].flatten(1)  # the guards act on observation latents; task texts only feed the context
        loss_tokens = (
            self.token_decoder.loss(
                z[:n_obs], token_ids(texts[:n_obs], self.encoder.tokenizer, self._ids), cfg.token_positions
            )
            if cfg.w_tokens > 0 and not frozen
            else flat.sum() * 0
        )
        loss_nce = self._contrastive_loss(self.heads.predict_next(c, a), flat, next_obs)
        loss_var, loss_cov = _variance_covariance(flat)

        loss = (
            loss_diff
            + cfg.w_reward * loss_r
            + cfg.w_done * loss_d
            + cfg.w_posterior * loss_post
            + cfg.w_behaviour * loss_beh
            + cfg.w_proposal * loss_prop
            + cfg.w_next_proposal * loss_next
            + cfg.w_contrastive * loss_nce
            + cfg.w_tokens * loss_tokens
            + cfg.w_variance * loss_var
            + cfg.w_covariance * loss_cov
        )
        logs = {
            "loss": loss.detach(),
            "loss_denoise": loss_diff.detach(),
            "loss_reward": loss_r.detach(),
            "loss_done": loss_d.detach(),
            "loss_posterior": loss_post.detach(),
            "loss_behaviour": loss_beh.detach(),
            "loss_proposal": loss_prop.detach(),
            "loss_next_proposal": loss_next.detach(),
            "loss_contrastive": loss_nce.detach(),
            "loss_tokens": loss_tokens.detach(),
            "loss_variance": loss_var.detach(),
            "loss_covariance": loss_cov.detach(),
        }
        extra = {
            "z": z.detach(),
            "z_target": z_target,
            "c": c_sim.detach(),  # what simulation conditions on
            "next_obs": next_obs,  # index of o_{t+1} into z
            "a": a.detach(),
            "vocab": vocab.detach(),
            "post": post.detach(),
            "prop": prop.detach(),
        }
        return loss, logs, extra

    @staticmethod
    def _proposal_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Plain mean BCE. Measured on 2k builtin episodes: normalising per admissible action instead
        (a 37x stronger signal) did not raise recall and cut one-step retrieval from 0.77 to 0.59."""
        return F.binary_cross_entropy_with_logits(logits, target)

    def _contrastive_loss(self, pred: torch.Tensor, keys: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """InfoNCE of predictions (B, D) against the batch's distinct observation latents (U, D);
        the right key of row i is `target[i]`. Texts in a batch are distinct, so no false negatives."""
        logits = F.normalize(pred, dim=-1) @ F.normalize(keys, dim=-1).T / self.cfg.temperature
        return F.cross_entropy(logits, target)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, logs, _ = self.model_step(batch)
        n = batch["reward"].numel()
        # the loss terms only on the steps the logger writes (the step count + 1 a multiple of
        # `log_every_n_steps`): Lightning's bookkeeping of a dozen values took ~7 ms of a ~0.12 s step
        every = self.trainer.log_every_n_steps if self._trainer is not None else 1
        if every <= 1 or (self.global_step + 1) % every == 0:
            self.log_dict({f"train/{k}": v for k, v in logs.items() if k != "loss"}, batch_size=n)
        self.log("train/loss", logs["loss"], prog_bar=True, batch_size=n)
        return loss

    def transfer_batch_to_device(self, batch: dict, device: torch.device, dataloader_idx: int) -> dict:
        """A batch is built on the CPU: on the CPU there is nothing to move (Lightning would walk every
        text of it)."""
        if device.type == "cpu":
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if bool(self.encoder_frozen):
            return
        with torch.no_grad():  # EMA target encoder
            for p_t, p in zip(self.target_encoder.parameters(), self.encoder.parameters()):
                p_t.lerp_(p, 1 - self.cfg.ema_decay)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        _, logs, x = self.model_step(batch)
        n = batch["reward"].numel()
        metrics = {f"val/{k}": v for k, v in logs.items()}
        gen = torch.Generator().manual_seed(batch_idx)
        z_hat = self.sample_next(x["c"], x["a"], gen)  # (B, L, d) sampled next latents
        reward_hat, done_hat = self.heads.transition(z_hat, x["c"], x["a"])
        both = batch["has_admissible"] & batch["has_next_admissible"]
        if both.any():  # candidate set of the sampled next state, from the true current set
            nxt = self.heads.next_proposal_logits(z_hat, x["c"], x["a"], batch["admissible"], x["vocab"])
            sets = set_metrics(nxt[both] > 0, batch["next_admissible"][both])
            metrics.update({f"val/next_proposal_{k}": v for k, v in sets.items()})
        metrics["val/reward_mae"] = (reward_hat - batch["reward"]).abs().mean()
        metrics["val/done_acc"] = ((done_hat > 0).float() == batch["done"]).float().mean()
        metrics["val/posterior_top1"] = (x["post"].argmax(-1) == batch["history_actions"][:, -1]).float().mean()
        has = batch["has_admissible"]
        if has.any():
            sets = set_metrics(x["prop"][has] > 0, batch["admissible"][has])
            metrics.update({f"val/proposal_{k}": v for k, v in sets.items()})
        flat = x["z"].flatten(1)
        metrics["val/latent_std_mean"] = flat.std(0).mean()
        metrics["val/latent_std_min"] = flat.std(0).min()
        metrics["val/latent_effective_rank"] = effective_rank(flat)
        k = self.cfg.retrieval_candidates
        if n >= k:
            hits = retrieval_top1(z_hat, x["z_target"][x["next_obs"]], batch["next_obs_id"], k)
            self.log(f"val/retrieval_top1_n{k}", hits, batch_size=(n // k) * k)
        self.log_dict(metrics, batch_size=n)

    def configure_optimizers(self):
        # by construction, not by requires_grad: a fit resumed after `freeze_encoder` must find the
        # optimizer state it saved (frozen parameters simply get no gradient)
        trainable = self.encoder.cfg.trainable
        params = [
            p
            for n, p in self.named_parameters()
            if not n.startswith("target_encoder.") and (trainable or not n.startswith("encoder."))
        ]
        fused = all(p.device.type in ("cpu", "cuda") for p in params)  # one kernel for all: ~3x faster on CPU
        return torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay, fused=fused)


def _cut_for_size(logits: torch.Tensor, size: int) -> float:
    """A logit threshold above which `size` of the flat `logits` lie: halfway between the size-th
    and the (size+1)-th largest."""
    k = min(size, logits.numel() - 1)
    top = logits.topk(k + 1).values
    return float(top[-2:].mean()) if k > 0 else float(top[0])


def _near_view(
    texts: list[str], hist: torch.Tensor, next_obs: torch.Tensor, task: torch.Tensor, window: int
) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch restricted to the last `window` history observations, o_{t+1} and the task: the texts
    the encoder must run on, and the indices remapped into them (older positions read as before the
    episode). A long history window would otherwise multiply the encoder's cost, which is most of a
    joint step; the window is read in full once latents are cached."""
    near = hist.clone()
    near[:, : max(hist.size(1) - window, 0)] = -1
    used = torch.unique(torch.cat([near[near >= 0], next_obs, task]))
    pos = torch.full((len(texts),), -1, dtype=torch.long)
    pos[used] = torch.arange(len(used))
    near = torch.where(near >= 0, pos[near.clamp(min=0)], near)
    return [texts[int(i)] for i in used], near, pos[next_obs], pos[task]


def _variance_covariance(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """VICReg (Bardes et al. 2022) variance hinge and covariance penalty of a batch of flat latents (N, D)."""
    if x.size(0) < 2:
        return x.sum() * 0, x.sum() * 0
    var = F.relu(1 - x.std(0)).mean()
    xc = x - x.mean(0)
    cov = xc.T @ xc / (x.size(0) - 1)  # (D, D)
    off = cov - torch.diag(torch.diag(cov))
    return var, off.pow(2).sum() / x.size(1)


def _check_proposal(mode: str) -> str:
    if mode not in PROPOSALS:
        raise ValueError(f"world_model.proposal: unknown mode '{mode}'; choose from {list(PROPOSALS)}")
    return mode


def _wm_config(d: dict) -> WorldModelConfig:
    d = dict(d)
    d["denoiser"] = DenoiserConfig(**d.get("denoiser", {}))
    d["sampler"] = SamplerConfig(**d.get("sampler", {}))
    return WorldModelConfig(**d)
