"""Small models made offline: a byte-level BPE tokenizer and a Llama-style causal LM."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


@dataclass
class TinyModelConfig:
    vocab_size: int = 1024  # environment text is a small closed vocabulary; words become single tokens
    hidden_size: int = 192
    intermediate_size: int = 512
    num_layers: int = 4  # ~2M parameters: a few ms per forward pass on 2 CPU cores
    num_heads: int = 4
    max_positions: int = 512  # longest prompt plus action, with room to spare


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
