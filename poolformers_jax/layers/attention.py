"""Baselines: softmax multi-head attention and linear (kernel) attention.

Both follow the mixer interface `mixer(x, mask=None, *, deterministic=True) -> y` and take
`causal=True` to forbid position t from seeing positions > t.
"""
from __future__ import annotations

from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.common import (NEG_INF, Array, Dtype, attention_bias, check_heads,
                                           check_sequence_input, compute_dtype, segment_allowed)


def split_heads(x: Array, num_heads: int) -> Array:
  """[B, L, D] -> [B, H, L, D/H]."""
  b, l, d = x.shape
  return x.reshape(b, l, num_heads, d // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x: Array) -> Array:
  """[B, H, L, Dh] -> [B, L, H*Dh]."""
  b, h, l, dh = x.shape
  return x.transpose(0, 2, 1, 3).reshape(b, l, h * dh)


def softmax_attention(q: Array, k: Array, v: Array, bias: Array) -> tuple[Array, Array]:
  """Scaled dot-product attention on [B, H, L, Dh]; softmax in float32. Returns (out, weights)."""
  scale = q.shape[-1] ** -0.5
  logits = jnp.einsum('bhqd,bhkd->bhqk', q, k, preferred_element_type=jnp.float32) * scale
  weights = jax.nn.softmax(logits + bias, axis=-1)
  out = jnp.einsum('bhqk,bhkd->bhqd', weights.astype(v.dtype), v)
  return out, weights


class MultiHeadAttention(nn.Module):
  """Softmax multi-head self-attention (Vaswani et al., 2017).

  Parameters are four Dense layers named query / key / value / out, each dim -> dim, so
  layers built on top of attention (SelfAttention2D, ContextPool + attention) can share
  weights with it in identity tests.
  """
  num_heads: int
  causal: bool = False
  dropout_rate: float = 0.0
  use_bias: bool = True
  dtype: Optional[Dtype] = None

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, *,
               segment_ids: Optional[Array] = None, deterministic: bool = True) -> Array:
    """`segment_ids` [B, L] (packed rows): tokens attend only within their own segment."""
    mask = check_sequence_input(x, mask, type(self).__name__)
    dim = x.shape[-1]
    check_heads(dim, self.num_heads, type(self).__name__)
    dtype = compute_dtype(self.dtype, x)
    dense = lambda name: nn.Dense(dim, use_bias=self.use_bias, dtype=dtype, name=name)
    q, k, v = (split_heads(dense(n)(x), self.num_heads) for n in ('query', 'key', 'value'))
    bias = attention_bias(mask, self.causal)
    if segment_ids is not None:
      bias = jnp.where(segment_allowed(segment_ids, mask)[:, None], bias, NEG_INF)
    out, weights = softmax_attention(q, k, v, bias)
    self.sow('intermediates', 'attention_weights', weights)
    out = nn.Dropout(self.dropout_rate)(out, deterministic=deterministic)
    return dense('out')(merge_heads(out))


FEATURE_MAPS: dict[str, Callable[[Array], Array]] = {
    'elu+1': lambda t: jax.nn.elu(t) + 1.0,   # Katharopoulos et al. (2020)
    'relu': jax.nn.relu,
}


def linear_attention(q: Array, k: Array, v: Array, mask: Array, causal: bool,
                     eps: float = 1e-6) -> Array:
  """Kernel attention out_i = phi(q_i) . sum_j phi(k_j) v_j^T / phi(q_i) . sum_j phi(k_j).

  `q, k` are already feature-mapped, all [B, H, L, Dh]; `mask: [B, L]` removes padded keys.
  Causal sums run over j <= i (prefix sums). Accumulation is in float32.
  """
  k = k * mask[:, None, :, None].astype(k.dtype)
  q32, k32, v32 = (t.astype(jnp.float32) for t in (q, k, v))
  if causal:
    kv = jnp.cumsum(jnp.einsum('bhld,bhle->bhlde', k32, v32), axis=2)
    num = jnp.einsum('bhld,bhlde->bhle', q32, kv)
    den = jnp.einsum('bhld,bhld->bhl', q32, jnp.cumsum(k32, axis=2))
  else:
    kv = jnp.einsum('bhld,bhle->bhde', k32, v32)
    num = jnp.einsum('bhld,bhde->bhle', q32, kv)
    den = jnp.einsum('bhld,bhd->bhl', q32, jnp.sum(k32, axis=2))
  return (num / (den[..., None] + eps)).astype(v.dtype)


class LinearAttention(nn.Module):
  """Linear attention with a positive feature map (`elu+1` or `relu`): memory linear in length."""
  num_heads: int
  feature_map: str = 'elu+1'
  causal: bool = False
  dropout_rate: float = 0.0  # accepted for interface parity; kernel attention has no weights to drop
  use_bias: bool = True
  dtype: Optional[Dtype] = None

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, *,
               deterministic: bool = True) -> Array:
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    if self.feature_map not in FEATURE_MAPS:
      raise ValueError(f'{name}: unknown feature_map {self.feature_map!r}; '
                       f'choose one of {sorted(FEATURE_MAPS)}.')
    dim = x.shape[-1]
    check_heads(dim, self.num_heads, name)
    dtype = compute_dtype(self.dtype, x)
    dense = lambda n: nn.Dense(dim, use_bias=self.use_bias, dtype=dtype, name=n)
    phi = FEATURE_MAPS[self.feature_map]
    q, k, v = (split_heads(dense(n)(x), self.num_heads) for n in ('query', 'key', 'value'))
    out = linear_attention(phi(q), phi(k), v, mask, self.causal)
    return dense('out')(merge_heads(out))
