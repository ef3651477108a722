"""Small models made offline: a byte-level BPE tokenizer and a Llama-style causal LM."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from adwm.policies.config import TinyModelConfig


def make_tiny_llama(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A freshly initialised Llama-style model sized for `tokenizer`."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)
