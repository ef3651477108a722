"""`LLMPolicy`: any Hugging Face causal LM as an agent.

Score mode: every admissible action is scored by its summed token
log-likelihood after the prompt (action text plus `action_suffix`, which ends
the action so "open the box" is not rewarded as a prefix of a longer one);
the policy samples from softmax(score / T), greedy with uniform tie-breaking at
T = 0. Generate mode (no admissible list): the model writes the action token by
token at temperature T until the suffix; `log_prob` is the summed
temperature-scaled token log-probability of the canonical tokenisation of
that text (0 / -inf under greedy decoding).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from adwm.policies.base import AgentState, Policy
from adwm.policies.config import PolicyConfig
from adwm.policies.generation import draw_token, sample_continuations
from adwm.policies.loading import load_causal_lm
from adwm.policies.prefix_tree import PrefixTree
from adwm.policies.prompt import render_prompt
from adwm.policies.sampling import log_probs_np
from adwm.policies.scoring import score_continuations
from adwm.runtime import costs


class LLMPolicy(Policy):
    def __init__(self, cfg: PolicyConfig, where: str = "policy") -> None:
        if cfg.mode not in ("score", "generate"):
            raise ValueError(f"{where}.mode: unknown mode '{cfg.mode}'; choose from ['generate', 'score']")
        if cfg.temperature < 0:
            raise ValueError(f"{where}.temperature: expected >= 0, got {cfg.temperature}")
        self.cfg, self.name = cfg, cfg.name
        self.model, self.tokenizer = load_causal_lm(
            cfg.model, cfg.tokenizer, cfg.gguf_file, cfg.trust_remote_code, cfg.dtype, cfg.device, f"{where}.model"
        )
        self.pad_id = self.tokenizer.pad_token_id
        self._encode_action = lru_cache(maxsize=65536)(self._encode_action_uncached)

    # -- tokenisation ----------------------------------------------------------
    def prompt_ids(self, state: AgentState) -> list[int]:
        text = render_prompt(self.cfg.prompt_template, state, self.cfg.history_turns)
        return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def _encode_action_uncached(self, action: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(action + self.cfg.action_suffix, add_special_tokens=False)["input_ids"])

    # -- score mode ------------------------------------------------------------
    def action_scores(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        """Summed token log-likelihood of each admissible action (temperature 1)."""
        out: list[np.ndarray] = []
        step = self.cfg.batch_states
        for start in range(0, len(states), step):
            chunk = states[start : start + step]
            prompts = [self.prompt_ids(s) for s in chunk]
            conts, owner = [], []
            for i, s in enumerate(chunk):
                conts += [self._encode_action(a) for a in s.admissible]
                owner += [i] * len(s.admissible)
            scores = score_continuations(self.model, prompts, conts, owner, self.pad_id, 1.0)
            sums = np.array([lp.sum() for lp in scores.token_logprobs])
            bounds = np.cumsum([0] + [len(s.admissible) for s in chunk])
            out += [sums[bounds[i] : bounds[i + 1]] for i in range(len(chunk))]
        return out

    def log_distributions(self, states: Sequence[AgentState]) -> list[np.ndarray]:
        for s in states:
            if not s.admissible:
                raise ValueError(f"policy '{self.name}': score mode needs admissible actions; use mode=generate")
        return [self._softmax(sc) for sc in self.action_scores(states)]

    def _softmax(self, scores: np.ndarray) -> np.ndarray:
        return log_probs_np(scores, self.cfg.temperature)

    # -- generate mode -----------------------------------------------------------
    def _generates(self, state: AgentState) -> bool:
        return self.cfg.mode == "generate" or state.admissible is None

    def generates(self, state: AgentState) -> bool:
        return self._generates(state)

    def act(self, states: Sequence[AgentState], rngs: Sequence[np.random.Generator]) -> list[str]:
        gen = [i for i, s in enumerate(states) if self._generates(s)]
        if not gen:
            return super().act(states, rngs)
        actions: list[str] = [""] * len(states)
        gen_set = set(gen)
        scored = [i for i in range(len(states)) if i not in gen_set]
        if scored:
            for i, a in zip(scored, super().act([states[i] for i in scored], [rngs[i] for i in scored])):
                actions[i] = a
        for i, text in zip(gen, self.write([self.prompt_ids(states[i]) for i in gen], [rngs[i] for i in gen])):
            actions[i] = text
        return actions

    def write(self, prompts, rngs: Sequence[np.random.Generator], tree: PrefixTree | None = None) -> list[str]:
        """The action text written after each prompt (token-id lists, or a left-padded (embeddings, mask)
        pair: an agent reading soft tokens), at this policy's temperature, up to the action suffix.

        With `tree` (token-id prompts), each row first draws from the logits the tree holds for its prompt
        and prefix, and the model runs only for the rows whose walk left the tree, from where it left;
        the logits it computes are stored."""
        suffix, eos, budget = self.cfg.action_suffix, self.tokenizer.eos_token_id, self.cfg.max_new_tokens

        def finished(ids: list[int]) -> bool:
            return len(ids) >= budget or ids[-1] == eos or suffix in self.tokenizer.decode(ids[-4:])

        n = len(rngs)
        if tree is None or isinstance(prompts, tuple):
            tree, prefixes, todo = None, [[] for _ in range(n)], list(range(n))
        else:
            keys = [tuple(p) for p in prompts]
            walks = [
                tree.walk(k, r, lambda lg, r: draw_token(lg, self.cfg.temperature, r), finished)
                for k, r in zip(keys, rngs)
            ]
            prefixes, todo = [w[0] for w in walks], [i for i, w in enumerate(walks) if not w[1]]
            costs.count("writer/states", n)
            costs.count("writer/states_generated", len(todo))
        ids = [list(p) for p in prefixes]
        if todo:
            rows = prompts if tree is None else [list(prompts[i]) + prefixes[i] for i in todo]

            def stop(j: int, new: list[int]) -> bool:
                return finished(prefixes[todo[j]] + new)

            def record(j: int, new: list[int], logits) -> None:
                tree.put(keys[todo[j]], prefixes[todo[j]] + new, logits)

            written = sample_continuations(
                self.model,
                rows,
                [rngs[i] for i in todo],
                self.pad_id,
                stop,
                self.cfg.temperature,
                budget,
                None if tree is None else record,
            )
            for i, new in zip(todo, written):
                ids[i] += new
        texts = [self.tokenizer.decode(toks, skip_special_tokens=True) for toks in ids]
        return [t.split(suffix)[0].strip() if suffix else t.strip() for t in texts]

    def log_probs(self, states: Sequence[AgentState], actions: Sequence[str]) -> list[float]:
        if not any(self._generates(s) for s in states):
            return super().log_probs(states, actions)
        out = [0.0] * len(states)
        gen = [i for i, s in enumerate(states) if self._generates(s)]
        for i, lp in zip(gen, self.generation_log_probs([states[i] for i in gen], [actions[i] for i in gen])):
            out[i] = float(lp)
        scored = [i for i in range(len(states)) if not self._generates(states[i])]
        if scored:
            for i, lp in zip(scored, super().log_probs([states[i] for i in scored], [actions[i] for i in scored])):
                out[i] = lp
        return out

    def generation_log_probs(self, states: Sequence[AgentState], actions: Sequence[str]) -> np.ndarray:
        """log p(action | state) of writing each action (plus the suffix) at this policy's temperature,
        batched over states -> (N,) float64; at T = 0, 0 where greedy decoding writes it, else -inf."""
        out = np.zeros(len(states))
        step = self.cfg.batch_states
        for start in range(0, len(states), step):
            chunk = range(start, min(start + step, len(states)))
            prompts = [self.prompt_ids(states[i]) for i in chunk]
            conts = [self._encode_action(actions[i]) for i in chunk]
            scores = score_continuations(
                self.model, prompts, conts, list(range(len(prompts))), self.pad_id, self.cfg.temperature
            )
            for j, i in enumerate(chunk):
                if self.cfg.temperature == 0:
                    out[i] = 0.0 if scores.greedy[j] else -np.inf
                else:
                    out[i] = scores.token_logprobs[j].sum()
        return out
