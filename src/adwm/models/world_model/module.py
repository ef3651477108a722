"""`WorldModelModule`: jointly trained text encoder + latent diffusion dynamics + heads.

The module wires the parts and the Lightning hooks; the objectives live in `objectives.py`, encoding
and the latent cache in `latents.py`, candidate actions in `candidates.py`, validation metrics in
`diagnostics.py`.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict

import lightning as L
import torch
from torch import nn

from adwm.diffusion.denoiser import Denoiser
from adwm.diffusion.sampler import DiffusionSampler
from adwm.diffusion.schedules import to_x0_eps
from adwm.encoders.config import EncoderConfig
from adwm.encoders.registry import build_encoder
from adwm.models.action_encoder import ActionEncoder
from adwm.models.heads import Heads
from adwm.models.history import HistoryEncoder
from adwm.models.proposal_bank import ProposalBank
from adwm.models.text_decoder import TextDecoder
from adwm.models.token_decoder import TokenDecoder
from adwm.models.world_model.candidates import CandidatesMixin
from adwm.models.world_model.config import PROPOSALS, WorldModelConfig, world_model_config
from adwm.models.world_model.diagnostics import validation_metrics
from adwm.models.world_model.latents import LatentsMixin
from adwm.models.world_model.objectives import world_model_step

# Lightning notes that the module's `transfer_batch_to_device` (a no-op on the CPU) wins over the datamodule's
warnings.filterwarnings("ignore", message=".*overridden `transfer_batch_to_device`.*")

__all__ = ["PROPOSALS", "WorldModelConfig", "WorldModelModule"]


class WorldModelModule(LatentsMixin, CandidatesMixin, L.LightningModule):
    def __init__(
        self,
        encoder: dict,
        world_model: dict,
        window: int,
        actions: list[str],
        texts: list[str] | None = None,
        tokenizer_json: str | None = None,
        decoder_vocab: dict | None = None,
    ) -> None:
        super().__init__()
        enc_cfg = EncoderConfig(**encoder)
        wm = world_model if isinstance(world_model, WorldModelConfig) else world_model_config(world_model)
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
                "decoder_vocab": decoder_vocab,
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
        # the text decoder (None without a vocabulary: a model made before it existed, or one built by hand);
        # drawn from its own seed, so adding it leaves every other weight of a seeded fit as it was
        self.text_decoder: TextDecoder | None = None
        if decoder_vocab is not None and wm.decoder.enabled:
            with torch.random.fork_rng():
                torch.manual_seed(len(decoder_vocab["pieces"]))
                self.text_decoder = TextDecoder(wm.decoder, decoder_vocab["pieces"], n * d, decoder_vocab["length"])
        self.register_buffer(
            "abar", self.sampler.abar, persistent=False
        )  # the sampler's schedule, moved with the module
        flat, offsets = self.action_encoder.token_ids(self.actions)  # tokenised once, embedded every step
        self.register_buffer("vocab_ids", flat, persistent=False)
        self.register_buffer("vocab_offsets", offsets, persistent=False)
        self.register_buffer("proposal_threshold", torch.zeros(()))  # logit cut of the head; set by calibration
        self.register_buffer("next_proposal_threshold", torch.zeros(()))  # the edit head's cut; set by calibration
        self.register_buffer("encoder_frozen", torch.zeros((), dtype=torch.bool))  # set by `freeze_encoder`
        self._latents: dict[str, torch.Tensor] = {}  # text -> latent once the encoder is frozen

    def vocab_embeddings(self) -> torch.Tensor:
        """(V, d_a) embeddings of the logged action vocabulary."""
        return self.action_encoder.embed(self.vocab_ids, self.vocab_offsets)

    def embed_actions(self, texts: list[str]) -> torch.Tensor:
        """(B, d_a) embeddings of action texts, logged or not (an agent's free-form actions)."""
        return self.action_encoder(texts)

    @property
    def free_form(self) -> bool:
        """Whether the log had no admissible lists (agents wrote their actions): its bank holds the logged
        states with no candidate lists, and in simulation the agent writes its action."""
        return self.proposal_bank is not None and self.proposal_bank.ids.numel() == 0

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

    def require_text_decoder(self) -> TextDecoder:
        """The text decoder, or an error that names how to get one."""
        if self.text_decoder is None:
            raise RuntimeError(
                "ablation.reader=decoded: this world model has no text decoder (fitted with "
                "world_model.decoder.enabled=false, which ablation.reader=decoded sets true); fit it again"
            )
        return self.text_decoder

    @torch.no_grad()
    def decode_text(self, z: torch.Tensor, prev_texts: list[str] | None = None) -> list[str]:
        """The observation text of each latent (B, L, d), written by the text decoder (`fit.decoder` trains it)
        after the text each row read before (`prev_texts`; None: none)."""
        return self.require_text_decoder().decode(z, prev_texts)

    @torch.no_grad()
    def sample_next(self, c: torch.Tensor, a: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """z_{t+1} ~ p(. | c, a) with the configured sampler (no guidance) -> (B, L, d)."""
        n, d = self.encoder.cfg.n_latents, self.encoder.cfg.d_latent
        return self.sampler.sample(lambda x, t: self.eps(x, t, c, a), (c.size(0), n, d), generator)

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
        """(loss, detached loss terms, tensors validation reads) of one batch (objectives.py)."""
        return world_model_step(self, batch)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, logs, _ = self.model_step(batch)
        n = batch["reward"].numel()
        # the loss terms only on the steps the logger writes (the step count + 1 a multiple of
        # `log_every_n_steps`): Lightning's bookkeeping of a dozen values is a noticeable share of a step
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
        metrics, retrieval = validation_metrics(self, batch, batch_idx, x)
        metrics.update({f"val/{k}": v for k, v in logs.items()})
        n = batch["reward"].numel()
        if retrieval is not None:
            name, hits, weight = retrieval
            self.log(name, hits, batch_size=weight)
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
        fused = all(p.device.type in ("cpu", "cuda") for p in params)  # one kernel for all parameters
        return torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay, fused=fused)
