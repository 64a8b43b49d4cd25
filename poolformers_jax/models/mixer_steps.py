"""Decoding steps of the causal mixers: one new token [B, 1, D] per call, with the parameters of
the mixer they stand for (same names and shapes, so a trained LM's parameters drive them) and
what the mixer's causal definition needs of the past in the 'cache' collection. The first call
(inside `init`, with the whole decode length [B, T, D]) creates the cache; every later call takes
the token at the cache's index, as the translation decoder's `Attention` does (models/seq2seq.py).

What each keeps of the past, and so what a token costs:
- softmax (MultiHeadAttention): the keys and values of every step (seq2seq's `Attention`):
  memory and work grow with the length.
- linear (LinearAttention, normalizer 'keys'): S = sum_j phi(k_j) [v_j, 1]^T, [B, H, Dh, Dh + 1],
  so out = phi(q) S[:, :Dh] / phi(q) S[:, Dh]: constant in the length.
- contextpool (ContextPoolAttention): the translation decoder's `ContextPoolStep` (the inputs,
  predictor states and pooling logits of the prefix; Eq. 4 pools the new token over all of them,
  O(t) per token) and the attention's keys and values.
- sac / msac: per scale, the inputs of the prefix (its causal 1 x m window is read from them) and
  the attention's keys and values: they grow with the length, as softmax's.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.attention import (
  FEATURE_MAPS,
  LinearAttention,
  MultiHeadAttention,
  merge_heads,
  softmax_attention,
  split_heads,
)
from poolformers_jax.layers.common import NEG_INF, Array, Dtype, attention_bias, compute_dtype
from poolformers_jax.layers.context_pool import ContextPoolAttention, ContextPoolOptions
from poolformers_jax.layers.msac import (
  MSAC,
  SAC,
  HeadForm,
  _relative_bias_param,
  head_channels,
  window_shape,
)
from poolformers_jax.layers.registry import mixer_fields
from poolformers_jax.models.seq2seq import Attention, ContextPoolStep


class SoftmaxStep(Attention):
  """MultiHeadAttention's step: seq2seq's `Attention` on its own keys-and-values cache."""
  decode: bool = True
  use_bias: bool = True   # Attention's projections have biases

  def __call__(self, x: Array) -> Array:   # type: ignore[override]
    if not self.use_bias:
      raise ValueError('MultiHeadAttention: use_bias=False has no decoding step (the cached '
                       'attention projects with biases); generate with a model trained with '
                       'use_bias=True.')
    causal = attention_bias(jnp.ones(x.shape[:2], bool), causal=True)   # cache creation's
    return super().__call__(x, x, causal)


class ContextPoolAttentionStep(ContextPoolOptions):
  """ContextPoolAttention's step: `ContextPoolStep` ('context_pool') then `SoftmaxStep`
  ('attention'); the pooling on the mixer's input or, placement 'block_output', on the block's
  output (`block_output`)."""
  num_heads: int
  placement: str = 'mixer_input'
  rotary: bool = False
  use_bias: bool = True
  dtype: Dtype | None = None

  def setup(self):
    self.context_pool = ContextPoolStep(dtype=self.dtype, **self.pool_options())
    self.attention = SoftmaxStep(self.num_heads, dtype=self.dtype, rotary=self.rotary,
                                 use_bias=self.use_bias)

  def __call__(self, x: Array) -> Array:
    if self.placement == 'mixer_input':
      x = self.context_pool(x)
    return self.attention(x)

  def block_output(self, x: Array) -> Array:
    return self.context_pool(x) if self.placement == 'block_output' else x


class LinearAttentionStep(nn.Module):
  """LinearAttention's step on the recurrent state S [B, H, Dh, Dh + 1] (module docstring)."""
  num_heads: int
  feature_map: str = 'elu+1'
  use_bias: bool = True
  normalizer: str = 'keys'
  dtype: Dtype | None = None
  eps: float = 1e-6   # linear_attention's

  @nn.compact
  def __call__(self, x: Array) -> Array:
    if self.normalizer != 'keys':
      raise ValueError(f"LinearAttention: normalizer={self.normalizer!r} scales by the padded "
                       'length of the whole input, which a decoder that sees one token at a time '
                       "has not got; generate with a model trained with normalizer='keys'.")
    dim = x.shape[-1]
    dense = lambda n: nn.Dense(dim, use_bias=self.use_bias, dtype=compute_dtype(self.dtype, x),
                               name=n)
    head_dim = dim // self.num_heads
    initialized = self.has_variable('cache', 'state')
    state = self.variable('cache', 'state', jnp.zeros,
                          (x.shape[0], self.num_heads, head_dim, head_dim + 1), jnp.float32)
    if not initialized:
      return jnp.zeros_like(x)
    phi = FEATURE_MAPS[self.feature_map]
    q, k, v = (split_heads(dense(n)(x), self.num_heads).astype(jnp.float32)
               for n in ('query', 'key', 'value'))                       # [B, H, 1, Dh]
    q, k = phi(q), phi(k)
    ones = jnp.ones(v.shape[:-1] + (1,), jnp.float32)
    state.value = state.value + jnp.einsum('bhld,bhle->bhde', k, jnp.concatenate([v, ones], -1))
    num_den = jnp.einsum('bhld,bhde->bhle', q, state.value)
    out = num_den[..., :-1] / (num_den[..., -1:] + self.eps)
    return dense('out')(merge_heads(out.astype(x.dtype)))


class SACStep(nn.Module):
  """A causal language-form SAC's step: the 1 x m window [t - m + 1, t] from the cached inputs,
  its query / key / value convolutions, attention over the cached keys with the relative bias
  b[t - j] (Eq. 3), and the regular convolution fused in when the SAC has one."""
  num_heads: int
  window: Any = 1
  features: int | None = None
  heads: HeadForm = 'full'
  regular_conv: bool = False
  relative_bias: bool = True
  max_distance: int = 64
  use_bias: bool = True
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array) -> Array:
    _, m = window_shape(self.window, True, 'SAC')
    batch, length, dim = x.shape      # at cache creation: the whole decode length
    features = self.features or dim
    inner = head_channels(features, self.num_heads, self.heads, 'SAC')
    dtype = compute_dtype(self.dtype, x)
    initialized = self.has_variable('cache', 'inputs')
    head_shape = (batch, self.num_heads, length, inner // self.num_heads)
    inputs = self.variable('cache', 'inputs', jnp.zeros, (batch, length + m - 1, dim), x.dtype)
    keys = self.variable('cache', 'cached_key', jnp.zeros, head_shape, dtype)
    values = self.variable('cache', 'cached_value', jnp.zeros, head_shape, dtype)
    index = self.variable('cache', 'index', lambda: jnp.array(0, jnp.int32))
    if not initialized:
      return jnp.zeros((batch, length, features), dtype)
    t, length = index.value, keys.value.shape[2]
    inputs.value = jax.lax.dynamic_update_slice(inputs.value, x, (0, t + m - 1, 0))
    window = jax.lax.dynamic_slice_in_dim(inputs.value, t, m, axis=1)[:, None]   # [B, 1, m, D]
    conv = lambda f, label: nn.Conv(f, (1, m), padding='VALID', use_bias=self.use_bias,
                                    dtype=dtype, name=label)(window)[:, 0]     # [B, 1, f]
    q, k, v = (split_heads(conv(inner, n), self.num_heads) for n in ('query', 'key', 'value'))
    keys.value = jax.lax.dynamic_update_slice(keys.value, k, (0, 0, t, 0))
    values.value = jax.lax.dynamic_update_slice(values.value, v, (0, 0, t, 0))
    back = t - jnp.arange(length)
    bias = jnp.where(back >= 0, 0.0, NEG_INF)[None, None, None, :]
    if self.relative_bias:
      table = _relative_bias_param(self, self.num_heads, 1, self.max_distance)
      bias = bias + table[:, 0, jnp.clip(back, 0, self.max_distance - 1)][None, :, None, :]
    out, _ = softmax_attention(q, keys.value, values.value, bias.astype(jnp.float32))
    index.value = t + 1
    y = nn.Dense(features, use_bias=self.use_bias, dtype=dtype, name='out')(merge_heads(out))
    if self.regular_conv:
      y = nn.Dense(features, use_bias=self.use_bias, dtype=dtype, name='fuse')(
          jnp.concatenate([y, conv(features, 'regular_conv')], axis=-1))
    return y


class MSACStep(nn.Module):
  """MSAC's step: a `SACStep` per window ('sac_<i>'), concatenated, then 'reduce'."""
  num_heads: int
  windows: Any = (1, 2, 3)
  options: Mapping[str, Any] | None = None   # the SACStep fields the scales share

  @nn.compact
  def __call__(self, x: Array) -> Array:
    options = dict(self.options or {})
    features = options.get('features') or x.shape[-1]
    scales = [SACStep(self.num_heads, window=w, name=f'sac_{i}', **options)(x)
              for i, w in enumerate(self.windows)]
    return nn.Dense(features, use_bias=options.get('use_bias', True),
                    dtype=compute_dtype(options.get('dtype'), x),
                    name='reduce')(jnp.concatenate(scales, axis=-1))


def _take(cls: type, options: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
  """The mixer's `options` that are fields of step class `cls` (plus `extra`)."""
  fields = mixer_fields(cls)
  return {**{k: v for k, v in options.items() if k in fields}, **extra}


def _msac_step(options: Mapping[str, Any], name: str) -> nn.Module:
  shared = _take(SACStep, options)
  return MSACStep(shared.pop('num_heads'), windows=tuple(options['windows']), options=shared,
                  name=name)


# mixer class -> (its options {field: value}, the step's name) -> its step module.
STEPS = {
    MultiHeadAttention: lambda o, name: SoftmaxStep(**_take(SoftmaxStep, o), name=name),
    LinearAttention: lambda o, name: LinearAttentionStep(**_take(LinearAttentionStep, o),
                                                         name=name),
    ContextPoolAttention: lambda o, name: ContextPoolAttentionStep(
        **_take(ContextPoolAttentionStep, o), name=name),
    SAC: lambda o, name: SACStep(**_take(SACStep, o), name=name),
    MSAC: _msac_step,
}


def mixer_step(cls: type, options: Mapping[str, Any]) -> nn.Module:
  """The decoding step of mixer class `cls` with `options` (every field's value), named as the
  mixer is inside a block (`<class name>_0`)."""
  if cls not in STEPS:
    raise ValueError(f'mixer {cls.__name__} has no decoding step; the mixers that generate: '
                     f'{sorted(c.__name__ for c in STEPS)}.')
  return STEPS[cls](options, f'{cls.__name__}_0')
