"""`ProjectorModule`: G_psi maps a world-model latent to m soft tokens in an agent's input-embedding space.

Trained with the world model frozen, by distillation (DESIGN section 2): the
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
from dataclasses import asdict, dataclass

import lightning as L
import torch
from einops import rearrange
from torch import nn

from adwm.policies.base import AgentState
from adwm.policies.llm import LLMPolicy
from adwm.policies.soft_prompt import SoftPromptScorer


@dataclass
class ProjectorConfig:
    n_tokens: int = 8  # m soft tokens per latent
    hidden: int = 256
    lora: bool = False  # a PEFT LoRA adapter on the agent, active only while it reads soft tokens
    lora_r: int = 8
    lora_alpha: int = 16
    w_kl: float = 1.0  # KL(text-reading || soft-reading) over the candidate actions
    # cross-entropy of the logged (behaviour) action under soft reading: it grounds the soft tokens but pulls
    # every estimate towards the logged value, so it is kept small (decisions.md: projector)
    w_ce: float = 0.05
    lr: float = 2e-3
    batch_size: int = 32  # logged states per step
    max_epochs: int = 2
    # Per agent backbone. A budget in optimiser steps does the same work on any machine, so a seed gives the
    # same projector under any load; max_minutes only guards against a machine far slower than expected.
    max_steps: int = 50  # 0 = no step limit
    max_minutes: float = 2.0
    max_train_states: int = 2000  # distinct logged states sampled for training (0 = all)
    # candidates per state in the distillation (the logged action and a random sample of the rest; 0 = all):
    # the agent scores each twice a step, and ScienceWorld's valid lists hold ~100-1400 (builtin <= 20)
    max_candidates: int = 32

    def __post_init__(self) -> None:
        if self.max_steps < 0:
            raise ValueError(
                f"projector.max_steps: expected a number of steps >= 0 (0 = no limit), got {self.max_steps}"
            )
        if self.max_candidates < 0 or self.max_candidates == 1:
            raise ValueError(f"projector.max_candidates: expected 0 (all) or at least 2, got {self.max_candidates}")
        for key in ("n_tokens", "hidden", "batch_size", "max_epochs"):
            if getattr(self, key) < 1:
                raise ValueError(f"projector.{key}: expected >= 1, got {getattr(self, key)}")


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
        z = wm.encode(batch["observations"])
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
