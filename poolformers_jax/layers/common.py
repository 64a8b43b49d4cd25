"""Shared building blocks: input checks, masks, MLP, DropPath, embeddings and positions.

Every sequence mixer follows the same interface (docs/design.md):

    mixer(x, mask=None, *, deterministic=True) -> y
    x: [batch, length, dim], mask: [batch, length] bool (True = real token), y like x.

`check_sequence_input` validates it while tracing, before XLA sees bad shapes. "One of these"
options are fields typed `Literal[...]`, checked together by `check_choices`.
"""
from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
Windowed = TypeVar('Windowed', jax.Array, np.ndarray)
Dtype = Any

# A large negative used instead of -inf so that fully masked rows give finite values.
NEG_INF = -1e9


def check_sequence_input(x: Array, mask: Array | None, name: str) -> Array:
  """Validates `x: [B, L, D]` and `mask: [B, L]`; returns a bool mask (all True if None)."""
  if x.ndim != 3:
    raise ValueError(
        f'{name}: expected input of shape [batch, length, dim], got rank {x.ndim} '
        f'shape {tuple(x.shape)}; reshape your tokens to [B, L, D].')
  if mask is None:
    return jnp.ones(x.shape[:2], dtype=bool)
  if tuple(mask.shape) != tuple(x.shape[:2]):
    raise ValueError(
        f'{name}: mask shape {tuple(mask.shape)} does not match input [batch, length] = '
        f'{tuple(x.shape[:2])}; pass a [B, L] bool mask (True = real token).')
  return check_mask(mask, name)


def check_mask(mask: Array, name: str) -> Array:
  """The mask contract: bool, or integers / floats holding only 0 and 1 (1 = real token);
  returns it as bool. Anything else is refused: an additive mask (0 for real tokens, -1e9 or -inf
  for padding) would act as its inverse, NaN as True. The values are checked outside jit only."""
  dtype = np.dtype(mask.dtype)
  if dtype == np.bool_:
    return mask
  what = (f'{name}: a mask is bool, or 0 / 1 integers or floats (1 = real token, 0 = padding); '
          'for an additive mask m (0 = real, -inf / -1e9 = padding) pass m == 0')
  if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
    raise ValueError(f'{what}. Got dtype {dtype}.')
  if not isinstance(mask, jax.core.Tracer):
    values = np.asarray(mask)
    bad = values[~((values == 0) | (values == 1))]
    if bad.size:
      raise ValueError(f'{what}. Got a {dtype} mask holding {bad.flat[0].item()!r}.')
  return mask.astype(bool)


def check_choice(owner: str, field: str, value: Any, choices: Iterable[Any]) -> None:
  """The "one of these" check of layers and models; the error names every valid value."""
  choices = list(choices)
  if value not in choices:
    raise ValueError(f'{owner}: unknown {field} {value!r}; choose one of {choices}.')


@functools.cache
def literal_fields(cls: type) -> dict[str, tuple[Any, ...]]:
  """{field: its values} for every field of (dataclass) `cls` typed `Literal[...]`."""
  return {name: typing.get_args(hint) for name, hint in typing.get_type_hints(cls).items()
          if typing.get_origin(hint) is Literal}


def check_choices(module: object, owner: str | None = None) -> None:
  """check_choice on every `Literal[...]` field of `module` (owner: its class name)."""
  cls: type = type(module)
  for field, choices in literal_fields(cls).items():
    check_choice(owner or cls.__name__, field, getattr(module, field), choices)


def check_image_input(x: Array, name: str) -> None:
  """Validates `x: [B, H, W, C]` (images and feature maps)."""
  if x.ndim != 4:
    raise ValueError(f'{name}: expected images [batch, height, width, channels], got shape '
                     f'{tuple(x.shape)}.')


def check_heads(dim: int, num_heads: int, name: str) -> int:
  """Returns head_dim; raises if `num_heads` does not divide `dim`."""
  if num_heads <= 0 or dim % num_heads:
    raise ValueError(
        f'{name}: num_heads={num_heads} does not divide the width dim={dim}; '
        f'choose num_heads among the divisors of {dim}.')
  return dim // num_heads


def compute_dtype(dtype: Dtype | None, x: Array) -> Dtype:
  """The dtype a layer computes in: its `dtype` attribute, else the input's dtype."""
  return dtype if dtype is not None else x.dtype


class Projection(nn.Module):
  """The kernel [in, features] and bias [features] (None without `use_bias`) of an
  `nn.Dense(features)`, same names, shapes and initialisers, for a mixer that applies them itself
  (PoNet's GA and AdaMRA fold them into averages instead of projecting every token)."""
  features: int
  use_bias: bool = True
  kernel_init: Callable = nn.linear.default_kernel_init

  @nn.compact
  def __call__(self, in_features: int) -> tuple[Array, Array | None]:
    kernel = self.param('kernel', self.kernel_init, (in_features, self.features))
    if not self.use_bias:
      return kernel, None
    return kernel, self.param('bias', nn.initializers.zeros_init(), (self.features,))


def attention_bias(mask: Array, causal: bool = False) -> Array:
  """Additive bias [B, 1, Lq, Lk]: NEG_INF at padded keys (and, `causal`, keys after the
  query), else 0."""
  allowed = mask[:, None, None, :]
  if causal:
    length = mask.shape[-1]
    allowed = allowed & jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]
  return jnp.where(allowed, 0.0, NEG_INF).astype(jnp.float32)


def segment_allowed(segment_ids: Array, mask: Array) -> Array:
  """[B, L, L] bool: query i may see key j only inside its own packed sentence (same segment
  id) when j is a real token."""
  same = segment_ids[:, :, None] == segment_ids[:, None, :]
  return same & mask[:, None, :]


def masked_mean(x: Array, mask: Array, axis: int = 1) -> Array:
  """Mean of `x` over `axis` counting only positions where `mask` is True."""
  m = mask.astype(x.dtype)
  while m.ndim < x.ndim:
    m = m[..., None]
  total = jnp.sum(x * m, axis=axis)
  count = jnp.maximum(jnp.sum(m, axis=axis), 1.0)
  return total / count


class MlpBlock(nn.Module):
  """Transformer feed-forward block: Dense -> activation -> dropout -> Dense -> dropout."""
  hidden_dim: int
  out_dim: int | None = None
  activation: Callable[[Array], Array] = nn.gelu
  dropout_rate: float = 0.0
  dtype: Dtype | None = None
  kernel_init: Callable = nn.initializers.xavier_uniform()

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
    dtype = compute_dtype(self.dtype, x)
    out_dim = self.out_dim or x.shape[-1]
    h = nn.Dense(self.hidden_dim, dtype=dtype, kernel_init=self.kernel_init, name='fc1')(x)
    h = self.activation(h)
    h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    h = nn.Dense(out_dim, dtype=dtype, kernel_init=self.kernel_init, name='fc2')(h)
    return nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)


class DropPath(nn.Module):
  """Stochastic depth: drops the whole residual branch per example with probability `rate`."""
  rate: float = 0.0

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
    if deterministic or self.rate == 0.0:
      return x
    keep = 1.0 - self.rate
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    rng = self.make_rng('dropout')
    return x * jax.random.bernoulli(rng, keep, shape).astype(x.dtype) / keep


class LearnedPositionEmbedding(nn.Module):
  """Adds a learned [1, max_length, D] table (trunc-normal std 0.02) to `x: [B, L, D]`, the rows
  of positions 0..L-1, or of `positions` [L] (a decoding step's; the caller keeps them below
  max_length)."""
  max_length: int
  std: float = 0.02

  @nn.compact
  def __call__(self, x: Array, positions: Array | None = None) -> Array:
    if positions is None and x.shape[1] > self.max_length:
      raise ValueError(
          f'LearnedPositionEmbedding: sequence length {x.shape[1]} exceeds max_length '
          f'{self.max_length}; raise the model max_length or truncate the inputs.')
    table = self.param('pos_embedding', nn.initializers.truncated_normal(self.std),
                       (1, self.max_length, x.shape[-1]))
    rows = table[:, :x.shape[1]] if positions is None else table[:, positions]
    return x + rows.astype(x.dtype)


# config.model.positions of the sequence models: 'learned' (a trained table added to the
# embeddings), 'sinusoidal' (Vaswani et al.'s fixed table), 'rotary' (nothing added: the mixers
# with a `rotary` field rotate query and key by position, RoFormer) or 'none'.
Positions = Literal['learned', 'sinusoidal', 'rotary', 'none']


def sinusoidal_positions(positions: Array, dim: int) -> Array:
  """Vaswani et al. (2017) Sec. 3.5 at integer `positions` [...] -> [..., dim] float32:
  PE(p, 2i) = sin(p / 10000^(2i/dim)), PE(p, 2i+1) = cos(p / 10000^(2i/dim)).
  `jnp.arange(L)` for a sequence; packed rows and decoding steps pass their own positions."""
  pos = positions.astype(jnp.float32)[..., None]
  i = jnp.arange(dim // 2, dtype=jnp.float32)
  angle = pos / jnp.power(10000.0, 2 * i / dim)
  table = jnp.zeros(positions.shape + (dim,), jnp.float32)
  table = table.at[..., 0::2].set(jnp.sin(angle))
  return table.at[..., 1::2].set(jnp.cos(angle[..., : dim - dim // 2]))


def apply_rotary(x: Array, num_heads: int, positions: Array | None = None) -> Array:
  """Rotary positions (RoFormer, Su et al. 2021, Eq. 34) of queries or keys `x` [B, L, H * Dh]
  (after their projection, before the heads are split): each head's feature pair (x_2i, x_2i+1)
  at position m turns by the angle m * 10000^(-2i/Dh), so a query-key product depends on the
  positions only through m - n (Eq. 16). `positions` [L] (or [B, L]); None = jnp.arange(L)."""
  batch, length, dim = x.shape
  head_dim = dim // num_heads
  if head_dim % 2:
    raise ValueError(f'rotary positions turn feature pairs: head dim {dim} / {num_heads} heads = '
                     f'{head_dim} is odd; choose a width and num_heads with an even head dim.')
  if positions is None:
    positions = jnp.arange(length)
  inv_freq = 1.0 / jnp.power(10000.0, jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
  angle = positions.astype(jnp.float32)[..., None] * inv_freq        # [(B,) L, Dh/2]
  cos, sin = jnp.cos(angle)[..., None, :], jnp.sin(angle)[..., None, :]   # one per head
  pairs = x.astype(jnp.float32).reshape(batch, length, num_heads, head_dim // 2, 2)
  even, odd = pairs[..., 0], pairs[..., 1]
  turned = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
  return turned.reshape(x.shape).astype(x.dtype)


def window_partition(x: Windowed, window: int) -> Windowed:
  """[B, H, W, C] -> [B * nW, window^2, C], windows in row-major order within each image (jax or
  numpy: Swin's shifted-window mask is built in numpy)."""
  b, h, w, c = x.shape
  x = x.reshape(b, h // window, window, w // window, window, c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)


def window_reverse(windows: Array, window: int, height: int, width: int) -> Array:
  """Inverse of window_partition: [B * nW, window^2, C] -> [B, H, W, C]."""
  c = windows.shape[-1]
  x = windows.reshape(-1, height // window, width // window, window, window, c)
  return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, height, width, c)
