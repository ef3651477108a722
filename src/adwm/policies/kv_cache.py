"""The KV caches of batched writing: a cache layer with room to decode into, and the plain caches whose rows
can be padded, merged and dropped.

`RoomyLayer` subclasses transformers' `DynamicLayer` (`transformers.cache_utils`), an internal class; it is
tested (tests/test_policies.py) against transformers 5.x, the range pyproject.toml allows (5.25 here).
Where a model's cache is not plain (sliding windows, quantisation), writing falls back to transformers'
own cache (`plain_cache` says which).
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def cache_name(model: torch.nn.Module) -> str:
    """transformers 5 renamed `past_key_values` to `cache` (argument and output)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class RoomyLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are the first positions of buffers with room for more: a
    decoded token is written in place, where `DynamicLayer.update` copies the whole cache (torch.cat) for
    every token. Rows leave as in `DynamicLayer` (`batch_select_indices`)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._keys, self._values, self.device, self.is_initialized = keys, values, keys.device, True
        self._view(length)

    @classmethod
    def empty_like(cls, keys: torch.Tensor, values: torch.Tensor, capacity: int, rows: int | None = None):
        """An empty layer of `rows` rows (those of `keys` by default) holding up to `capacity` positions;
        every position is zero until written (padding is masked, but its values must be finite)."""
        rows = keys.size(0) if rows is None else rows
        k = keys.new_zeros((rows, keys.size(1), capacity, keys.size(-1)))
        v = values.new_zeros((rows, values.size(1), capacity, values.size(-1)))
        return cls(k, v, 0)

    def _view(self, length: int) -> None:
        self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

    def write(self, rows, keys: torch.Tensor, values: torch.Tensor, width: int | None = None) -> None:
        """Copy a (sub-)batch's cache into `rows` (an index tensor, or a slice), right-aligned to position
        `width` (its own width by default), which becomes this layer's length."""
        width = keys.size(-2) if width is None else width
        span = slice(width - keys.size(-2), width)
        if isinstance(rows, slice):
            self._keys[rows, :, span] = keys
            self._values[rows, :, span] = values
        else:
            self._keys[:, :, span].index_copy_(0, rows, keys)
            self._values[:, :, span].index_copy_(0, rows, values)
        self._view(width)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n, m = self.keys.size(-2), key_states.size(-2)
        if n + m > self._keys.size(-2):  # out of room: grow as DynamicLayer would
            self._keys = torch.cat([self.keys, key_states], dim=-2)
            self._values = torch.cat([self.values, value_states], dim=-2)
        else:
            self._keys[:, :, n : n + m] = key_states
            self._values[:, :, n : n + m] = value_states
        self._view(n + m)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        n = self.keys.size(-2)
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._view(n)


def cache_of(layers: list[DynamicLayer]) -> DynamicCache:
    """A `DynamicCache` made of the given layers."""
    cache = DynamicCache()
    cache.layers, cache.layer_class_to_replicate = list(layers), None
    return cache


def plain_cache(cache) -> bool:
    """Whether `cache` is a plain per-layer key/value cache (no sliding windows, quantisation, ...), whose
    rows can be padded, merged and dropped."""
    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, DynamicCache) and bool(layers) and all(type(x) in (DynamicLayer, RoomyLayer) for x in layers)
    )


def keep_rows(cache, rows: list[int]) -> bool:
    """Keep only the batch rows `rows` of a plain cache (in place) -> whether it could."""
    if not plain_cache(cache):
        return False
    cache.batch_select_indices(torch.tensor(rows))
    return True
