"""Text encoders by registry name (DESIGN section 2, encoder E)."""

from adwm.encoders.base import EncoderConfig, TextEncoder
from adwm.encoders.registry import ENCODERS, build_encoder

__all__ = ["ENCODERS", "EncoderConfig", "TextEncoder", "build_encoder"]
