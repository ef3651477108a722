"""Text encoders by registry name."""

from adwm.runtime.lazy import lazy_exports

_WHERE = {
    "ENCODERS": "adwm.encoders.registry",
    "EncoderConfig": "adwm.encoders.config",
    "TextEncoder": "adwm.encoders.base",
    "build_encoder": "adwm.encoders.registry",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
