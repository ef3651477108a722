"""`PrefixTree`: a writing agent's next-token logits after a prompt and a prefix of what it wrote, kept so
that writing after the same prompt again costs no forward pass where it follows a path already taken.

Writing draws token by token from softmax(logits / T); the logits after (prompt, prefix) do not depend on
the temperature, the generator or the batch, so a draw from stored logits is a draw from the agent. A
walk goes down the tree with the row's own generator while the logits of its prefix are stored; the model
runs only from the first prefix that is not (`LLMPolicy.write`), and what it computes is stored in turn.
In simulation the agent reads logged texts (`NearestTextReader`), so prompts repeat across rollouts, steps
and the policies of a family that share a checkpoint and prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch


class PrefixTree:
    def __init__(self, max_mb: float) -> None:
        """Logits are stored until they take `max_mb` MB (float32, one vector a node); past that, the tree
        still serves what it holds and stores nothing new."""
        if max_mb < 0:
            raise ValueError(f"PrefixTree: max_mb must be >= 0, got {max_mb}")
        self.max_bytes, self.bytes = int(max_mb * 2**20), 0
        self.nodes: dict[tuple[int, ...], dict[tuple[int, ...], torch.Tensor]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self.nodes.values())

    def put(self, prompt: tuple[int, ...], prefix: Sequence[int], logits: torch.Tensor) -> None:
        size = logits.numel() * 4
        if self.bytes + size > self.max_bytes:
            return
        node = self.nodes.setdefault(prompt, {})
        key = tuple(prefix)
        if key not in node:
            node[key] = logits.detach().float().cpu().clone()
            self.bytes += size

    def walk(
        self,
        prompt: tuple[int, ...],
        rng: np.random.Generator,
        draw: Callable[[torch.Tensor, np.random.Generator], int],
        finished: Callable[[list[int]], bool],
    ) -> tuple[list[int], bool]:
        """Draw tokens after `prompt` from stored logits while there are any -> (the tokens drawn, whether
        the action is finished: `finished(tokens)`); an unfinished walk continues with the model."""
        node, ids = self.nodes.get(prompt), []
        while node is not None:
            logits = node.get(tuple(ids))
            if logits is None:
                break
            ids.append(draw(logits, rng))
            if finished(ids):
                return ids, True
        return ids, False
