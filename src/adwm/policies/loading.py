"""Loading Hugging Face causal LMs and tokenizers by name or local path, offline-first."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from adwm.runtime.devices import resolve_device
from adwm.runtime.hub import check_model_source

hf_logging.disable_progress_bar()  # one bar per checkpoint load drowns the command's own progress lines

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_causal_lm(
    model: str,
    tokenizer: str | None = None,
    gguf_file: str | None = None,
    trust_remote_code: bool = False,
    dtype: str = "float32",
    device: str = "cpu",
    where: str = "policy.model",
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Load a causal LM in eval mode plus its tokenizer; errors name the config key `where`.

    Loads are cached per process, so policies that share a checkpoint (an
    epsilon family) share one copy.
    """
    check_model_source(model, where)
    if dtype not in DTYPES:
        raise ValueError(f"{where}: unknown dtype '{dtype}'; choose from {sorted(DTYPES)}")
    try:
        return _load(model, tokenizer, gguf_file, trust_remote_code, dtype, device)
    except OSError as err:
        hint = ""
        if not Path(model).expanduser().exists() and os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "false"):
            hint = " (a Hugging Face name: downloads are off; set hub=true to let from_pretrained fetch it)"
        raise FileNotFoundError(f"{where}: cannot load model '{model}': {str(err).splitlines()[0]}{hint}") from err


@lru_cache(maxsize=8)
def _load(
    model: str, tokenizer: str | None, gguf_file: str | None, trust_remote_code: bool, dtype: str, device: str
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(tokenizer or model, trust_remote_code=trust_remote_code, **extra)
    lm = AutoModelForCausalLM.from_pretrained(model, trust_remote_code=trust_remote_code, dtype=DTYPES[dtype], **extra)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return lm.to(resolve_device(device, "policy.device")).eval(), tok


def model_fingerprint(model: str) -> str | None:
    """Identity of a local checkpoint's weights (names, sizes, modification times of its weight files),
    so results made from an agent are not reused after it is retrained; None for hub names."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    files = sorted(p for ext in ("*.safetensors", "*.bin", "*.gguf") for p in path.glob(ext))
    h = hashlib.sha1()
    for p in files:
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]
