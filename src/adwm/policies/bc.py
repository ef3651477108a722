"""Behaviour cloning of a causal LM (or a PEFT-wrapped one) on (prompt, action) pairs, as a LightningModule."""

from __future__ import annotations

import math

import lightning as L
import torch


class BehaviourCloningModule(L.LightningModule):
    """Next-token cross-entropy on the action span; the prompt only conditions."""

    def __init__(
        self, model: torch.nn.Module, lr: float, weight_decay: float, warmup_steps: int, max_steps: int
    ) -> None:
        super().__init__()
        self.model = model
        self.save_hyperparameters(ignore=["model"])

    def model_step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model  # PEFT-wrapped?
        hidden = lm.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        # hidden: (B, L, H)
        target = batch["labels"][:, 1:]  # position t predicts token t+1
        supervised = target != -100  # only action tokens: skip the LM head on prompt positions
        logits = self.model.get_output_embeddings()(hidden[:, :-1][supervised])  # (N, V)
        target = target[supervised]  # (N,)
        loss = torch.nn.functional.cross_entropy(logits, target)
        acc = (logits.argmax(-1) == target).float().mean()
        return loss, {"loss": loss.detach(), "token_acc": acc}

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, logs = self.model_step(batch)
        self.log_dict({f"train/{k}": v for k, v in logs.items()}, prog_bar=True, batch_size=batch["input_ids"].size(0))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        _, logs = self.model_step(batch)
        self.log_dict({f"val/{k}": v for k, v in logs.items()}, prog_bar=True, batch_size=batch["input_ids"].size(0))

    def configure_optimizers(self):
        hp = self.hparams
        trainable = [p for p in self.model.parameters() if p.requires_grad]  # only the adapter under LoRA
        opt = torch.optim.AdamW(trainable, lr=hp.lr, weight_decay=hp.weight_decay)

        def schedule(step: int) -> float:  # linear warm-up, then cosine decay to 10%
            if step < hp.warmup_steps:
                return (step + 1) / hp.warmup_steps
            frac = min(1.0, (step - hp.warmup_steps) / max(1, hp.max_steps - hp.warmup_steps))
            return 0.1 + 0.45 * (1 + math.cos(math.pi * frac))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
