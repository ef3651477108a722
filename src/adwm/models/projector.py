"""`ProjectorModule`: G_psi maps a world-model latent to m soft tokens in an agent's input-embedding space.

Trained with the world model frozen, by distillation: the
agent's distribution over the candidate actions while reading soft tokens must
match its distribution while reading the real observation text (KL), plus
cross-entropy on the logged action. An optional LoRA adapter (PEFT) on the
agent is switched on only while it reads soft tokens; the text-reading teacher
always runs with the adapter off, so the agent itself is never changed.
Only the projector (and adapter) weights go into this module's checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import asdict

import lightning as L
import torch
from einops import rearrange
from torch import nn

from adwm.models.config import ProjectorConfig
from adwm.policies.base import AgentState
from adwm.policies.llm import LLMPolicy
from adwm.policies.soft_prompt import SoftPromptScorer


class Projector(nn.Module):
    """Flat latent (B, L*d) -> (B, m, D), scaled to the agent's typical embedding norm."""

    def __init__(self, d_latent_flat: int, n_tokens: int, d_embed: int, hidden: int, embed_rms: float) -> None:
        super().__init__()
        self.n_tokens, self.d_embed = n_tokens, d_embed
        self.net = nn.Sequential(
            nn.Linear(d_latent_flat, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, n_tokens * d_embed),
        )
        self.norm = nn.LayerNorm(d_embed, elementwise_affine=False)
        self.gain = nn.Parameter(torch.tensor(float(embed_rms)))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = rearrange(self.net(rearrange(z, "b l d -> b (l d)")), "b (m e) -> b m e", m=self.n_tokens, e=self.d_embed)
        return self.norm(out) * self.gain


def candidate_log_softmax(scores: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.log_softmax(s, dim=-1) for s in scores]


class ProjectorModule(L.LightningModule):
    """Holds the frozen world model and agent outside its parameters; trains G_psi (+ LoRA)."""

    def __init__(self, projector: dict, latent_shape: tuple[int, int], agent: str) -> None:
        super().__init__()
        self.cfg = ProjectorConfig(**projector)
        self.save_hyperparameters({"projector": asdict(self.cfg), "latent_shape": list(latent_shape), "agent": agent})
        self.agent_id = agent
        self._frozen: dict = {}  # world model and policy: not submodules, not in the checkpoint
        self.projector: Projector | None = None
        self.latent_shape = tuple(latent_shape)

    # -- wiring -------------------------------------------------------------------
    def attach(self, world_model, policy: LLMPolicy) -> ProjectorModule:
        """Connect the frozen world model and the agent; builds G_psi (and the adapter) on first use."""
        world_model.eval().requires_grad_(False)
        policy.model.requires_grad_(False)
        if self.cfg.lora and not hasattr(policy.model, "disable_adapter"):
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(r=self.cfg.lora_r, lora_alpha=self.cfg.lora_alpha, target_modules="all-linear")
            # a copy: loaded models are cached per process and shared by every policy on that checkpoint
            policy.model = get_peft_model(copy.deepcopy(policy.model), lora)
            state = getattr(self, "_adapter_state", None)
            if state:  # a loaded projector brings its adapter weights
                params = dict(policy.model.named_parameters())
                with torch.no_grad():
                    for name, value in state.items():
                        params[name].copy_(value)
        scorer = SoftPromptScorer(policy)
        self._frozen = {"world_model": world_model, "policy": policy, "scorer": scorer}
        if self.projector is None:
            emb = scorer.embedding.weight.detach()
            n, d = self.latent_shape
            self.projector = Projector(
                n * d, self.cfg.n_tokens, scorer.embed_dim, self.cfg.hidden, emb.norm(dim=-1).mean()
            )
        elif self.projector.d_embed != scorer.embed_dim:
            raise ValueError(
                f"projector: trained for agents with {self.projector.d_embed}-dim input embeddings, but "
                f"'{policy.name}' has {scorer.embed_dim}; train a projector for this agent backbone"
            )
        return self

    @property
    def scorer(self) -> SoftPromptScorer:
        if not self._frozen:
            raise RuntimeError("projector: call attach(world_model, policy) before use")
        return self._frozen["scorer"]

    def adapter(self, on: bool):
        """Context in which the LoRA adapter is on (soft reading) or off (text reading)."""
        model = self._frozen["policy"].model
        if on or not hasattr(model, "disable_adapter"):
            return contextlib.nullcontext()
        return model.disable_adapter()

    def adapter_parameters(self) -> list[nn.Parameter]:
        model = self._frozen["policy"].model
        return [p for n, p in model.named_parameters() if "lora_" in n]

    # -- reading ---------------------------------------------------------------------
    def soft_scores(self, z: torch.Tensor, tasks: list[str], candidates: list[list[str]]) -> list[torch.Tensor]:
        """Candidate-action scores of the agent reading latents z (B, L, d) as soft tokens."""
        with self.adapter(True):
            return self.scorer.scores(tasks, self.projector(z), candidates)

    @torch.no_grad()
    def write(self, z: torch.Tensor, tasks: list[str], rngs) -> list[str]:
        """The action the agent writes reading latents z (B, L, d) as soft tokens (free-form logs)."""
        with self.adapter(True):
            return self.scorer.write(tasks, self.projector(z), rngs)

    @torch.no_grad()
    def text_scores(self, tasks: list[str], observations: list[str], candidates: list[list[str]]) -> list[torch.Tensor]:
        policy = self._frozen["policy"]
        states = [AgentState(t, o, [], list(c)) for t, o, c in zip(tasks, observations, candidates)]
        with self.adapter(False):
            return [torch.as_tensor(s, dtype=torch.float32) for s in policy.action_scores(states)]

    # -- training ----------------------------------------------------------------------
    def distill_step(self, batch: dict) -> dict[str, torch.Tensor]:
        wm = self._frozen["world_model"]
        z = wm.encode(batch["observations"]).to(self.device)  # the frozen world model may sit elsewhere
        soft = candidate_log_softmax(self.soft_scores(z, batch["tasks"], batch["candidates"]))
        text = candidate_log_softmax(self.text_scores(batch["tasks"], batch["observations"], batch["candidates"]))
        kl = torch.stack([(t.exp() * (t - s)).sum() for t, s in zip(text, soft)]).mean()
        ce = torch.stack([-s[i] for s, i in zip(soft, batch["logged"])]).mean()
        agree = torch.tensor([float(s.argmax() == t.argmax()) for s, t in zip(soft, text)]).mean()
        return {"loss": self.cfg.w_kl * kl + self.cfg.w_ce * ce, "kl": kl, "ce": ce, "top1_agreement": agree}

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        out = self.distill_step(batch)
        n = len(batch["tasks"])
        self.log_dict({f"train/{k}": v.detach() for k, v in out.items()}, batch_size=n, prog_bar=False)
        return out["loss"]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        out = self.distill_step(batch)
        self.log_dict({f"val/{k}": v for k, v in out.items()}, batch_size=len(batch["tasks"]))

    def configure_optimizers(self):
        params = list(self.projector.parameters()) + (self.adapter_parameters() if self.cfg.lora else [])
        return torch.optim.AdamW(params, lr=self.cfg.lr)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.cfg.lora and self._frozen:
            checkpoint["adapter"] = {
                n: p.detach().cpu() for n, p in self._frozen["policy"].model.named_parameters() if "lora_" in n
            }
        checkpoint["projector_dims"] = [self.projector.n_tokens, self.projector.d_embed, self.cfg.hidden]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        n, d = self.latent_shape
        m, d_embed, hidden = checkpoint["projector_dims"]
        self.projector = Projector(n * d, m, d_embed, hidden, 1.0)
        self._adapter_state = checkpoint.get("adapter")
