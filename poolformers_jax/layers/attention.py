"""Baselines: softmax multi-head attention and linear (kernel) attention.

Both follow the mixer interface `mixer(x, mask=None, *, deterministic=True) -> y` and take
`causal=True` to forbid position t from seeing positions > t.

Softmax attention has four implementations of the same function (`implementation=`):
- 'explicit': einsum scores [B, H, L, L] in float32 (the papers' naive baseline); the only one
  that can sow the attention weights.
- 'xla': `jax.nn.dot_product_attention(implementation='xla')`; XLA's own fusion, still [L, L].
- 'cudnn': cuDNN flash attention (NVIDIA GPU, bf16/fp16, head dim a multiple of 8): memory
  linear in L. The padding mask reaches cuDNN as per-sequence lengths (mask.sum), which is
  exact for right-padded masks (real tokens first, as every data pipeline here pads).
- 'auto': 'cudnn' where it applies, else 'xla'.
"""
from __future__ import annotations

import typing
from typing import Callable, Literal, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.common import (NEG_INF, Array, Dtype, apply_rotary, attention_bias,
                                           check_choice, check_choices, check_heads,
                                           check_sequence_input, compute_dtype, segment_allowed)
from poolformers_jax.layers.registry import register_mixer


def split_heads(x: Array, num_heads: int) -> Array:
  """[B, L, D] -> [B, H, L, D/H]."""
  b, l, d = x.shape
  return x.reshape(b, l, num_heads, d // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x: Array) -> Array:
  """[B, H, L, Dh] -> [B, L, H*Dh]."""
  b, h, l, dh = x.shape
  return x.transpose(0, 2, 1, 3).reshape(b, l, h * dh)


def softmax_attention(q: Array, k: Array, v: Array, bias: Array,
                      drop: Optional[Callable[[Array], Array]] = None) -> tuple[Array, Array]:
  """Scaled dot-product attention on [B, H, L, Dh]; softmax in float32. Returns (out, weights).
  `drop`: applied to the weights before they average the values (attention-probability dropout);
  the returned weights are the undropped ones."""
  scale = q.shape[-1] ** -0.5
  logits = jnp.einsum('bhqd,bhkd->bhqk', q, k, preferred_element_type=jnp.float32) * scale
  weights = jax.nn.softmax(logits + bias, axis=-1)
  probs = weights if drop is None else drop(weights)
  out = jnp.einsum('bhqk,bhkd->bhqd', probs.astype(v.dtype), v)
  return out, weights


Implementation = Literal['explicit', 'xla', 'cudnn', 'auto']


def cudnn_unavailable_reason(dtype: Dtype, head_dim: int) -> Optional[str]:
  """Why cuDNN flash attention cannot run here (None if it can)."""
  device = jax.devices()[0]
  if device.platform != 'gpu' or 'cuda' not in str(device.client.platform_version).lower():
    return f'it needs an NVIDIA GPU, this process runs on {device.platform} ({device.device_kind})'
  if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
    return f'it needs bfloat16/float16 inputs, got {jnp.dtype(dtype).name} (set dtype=bfloat16)'
  if head_dim % 8 or head_dim > 128:
    return f'it needs a head dim that is a multiple of 8 and <= 128, got {head_dim}'
  return None


def resolve_implementation(implementation: str, dtype: Dtype, head_dim: int, owner: str) -> str:
  """'auto' -> 'cudnn' or 'xla'; a one-line ValueError for an unknown or impossible choice."""
  check_choice(owner, 'implementation', implementation, typing.get_args(Implementation))
  if implementation in ('cudnn', 'auto'):
    reason = cudnn_unavailable_reason(dtype, head_dim)
    if implementation == 'auto':
      return 'xla' if reason else 'cudnn'
    if reason:
      raise ValueError(f"{owner}: implementation='cudnn' cannot run: {reason}; use 'auto', "
                       f"'xla' or 'explicit'.")
  return implementation


def fused_attention(q: Array, k: Array, v: Array, mask: Array, causal: bool,
                    implementation: str) -> Array:
  """jax.nn.dot_product_attention on [B, L, H, Dh] with key padding `mask: [B, L]` (or, 'xla'
  only, an allowed matrix [B, L, L]: packed rows)."""
  if implementation == 'cudnn':
    # cuDNN takes padding as lengths (a dense mask would become an [L, L] bias). Its backward
    # need not write dQ/dK/dV at padded positions; zeroing q, k, v there makes their gradient
    # zero whatever it leaves (benchmarks/check_cudnn.py compares the gradients with 'xla').
    lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32)
    q, k, v = (jnp.where(mask[:, :, None, None], t, 0) for t in (q, k, v))
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, query_seq_lengths=lengths,
                                        key_value_seq_lengths=lengths, implementation='cudnn')
  mask = mask[:, None, None, :] if mask.ndim == 2 else mask[:, None]
  return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal,
                                      implementation='xla')


@register_mixer('softmax')
class MultiHeadAttention(nn.Module):
  """Softmax multi-head self-attention (Vaswani et al., 2017).

  Parameters are four Dense layers named query / key / value / out, each dim -> dim, so
  layers built on top of attention (SelfAttention2D, ContextPool + attention) can share
  weights with it in identity tests. `implementation` picks how the softmax is computed (module
  docstring); only 'explicit' sows 'attention_weights'. Dropout acts on the attention output
  (before the out projection) in every implementation, or with `dropout_on='weights'`
  ('explicit' only) on the attention probabilities, as the Nystromformer / PoNet LRA code does
  (attention.py: `attn = self.drop_attn(softmax(dot))`).
  """
  num_heads: int
  causal: bool = False
  dropout_rate: float = 0.0
  use_bias: bool = True
  dtype: Optional[Dtype] = None
  implementation: Implementation = 'explicit'
  kernel_init: Callable = nn.linear.default_kernel_init   # BERT: normal(0.02)
  dropout_on: Literal['output', 'weights'] = 'output'     # 'weights': explicit only
  rotary: bool = False   # rotary positions on q and k (RoFormer; common.apply_rotary)

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, *,
               segment_ids: Optional[Array] = None, deterministic: bool = True) -> Array:
    """`segment_ids` [B, L] (packed rows): tokens attend only within their own segment."""
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    dim = x.shape[-1]
    head_dim = check_heads(dim, self.num_heads, name)
    dtype = compute_dtype(self.dtype, x)
    check_choices(self)
    implementation = resolve_implementation(self.implementation, dtype, head_dim, name)
    if self.dropout_on == 'weights' and implementation != 'explicit':
      raise ValueError(f"{name}: dropout_on='weights' needs implementation='explicit' (the fused "
                       f"kernels never form the weights), got {implementation!r}.")
    dense = lambda name: nn.Dense(dim, use_bias=self.use_bias, dtype=dtype,
                                  kernel_init=self.kernel_init, name=name)
    q, k, v = (dense(n)(x) for n in ('query', 'key', 'value'))
    if self.rotary:
      q, k = apply_rotary(q, self.num_heads), apply_rotary(k, self.num_heads)
    dropout = nn.Dropout(self.dropout_rate)
    allowed = None if segment_ids is None else segment_allowed(segment_ids, mask)   # [B, L, L]
    if allowed is not None and implementation == 'cudnn':   # cuDNN takes lengths, not segments
      if self.implementation != 'auto':
        raise ValueError(f"{name}: implementation='cudnn' takes no packed rows (segment_ids); "
                         "use 'auto', 'xla' or 'explicit'.")
      implementation = 'xla'
    if implementation == 'explicit':
      q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))
      bias = attention_bias(mask, self.causal)
      if allowed is not None:
        bias = jnp.where(allowed[:, None], bias, NEG_INF)
      drop = lambda t: dropout(t, deterministic=deterministic)
      on_weights = self.dropout_on == 'weights'
      out, weights = softmax_attention(q, k, v, bias, drop if on_weights else None)
      self.sow('intermediates', 'attention_weights', weights)
      out = merge_heads(out if on_weights else drop(out))
    else:
      heads = lambda t: t.reshape(t.shape[:2] + (self.num_heads, head_dim))   # [B, L, H, Dh]
      out = fused_attention(heads(q), heads(k), heads(v), mask if allowed is None else allowed,
                            self.causal, implementation)
      out = dropout(out.reshape(x.shape[:2] + (dim,)), deterministic=deterministic)
    return dense('out')(out)


FEATURE_MAPS: dict[str, Callable[[Array], Array]] = {
    'elu+1': lambda t: jax.nn.elu(t) + 1.0,   # Katharopoulos et al. (2020)
    'relu': jax.nn.relu,
}


def linear_attention(q: Array, k: Array, v: Array, mask: Array, causal: bool,
                     eps: float = 1e-6, normalizer: str = 'keys') -> Array:
  """Kernel attention on feature-mapped `q, k` and `v`, all [B, H, L, Dh]; `mask: [B, L]` removes
  padded keys. Causal sums run over j <= i (prefix sums). Accumulation is in float32.

  normalizer 'keys' (Katharopoulos et al. 2020):
      out_i = phi(q_i) . sum_j phi(k_j) v_j^T / phi(q_i) . sum_j phi(k_j)
  normalizer 'padded_length' (the Nystromformer / PoNet LRA code, attention_linear.py): no
  normaliser; phi(q) and phi(k) are each scaled by L^(-1/4), L the padded length of the input:
      out_i = phi(q_i) . sum_j phi(k_j) v_j^T / sqrt(L)
  so the output depends on how much padding the batch carries (not on its values).
  """
  k = k * mask[:, None, :, None].astype(k.dtype)
  q32, k32, v32 = (t.astype(jnp.float32) for t in (q, k, v))
  if normalizer == 'padded_length':
    scale = float(q.shape[2]) ** -0.25
    q32, k32 = q32 * scale, k32 * scale
  if causal:
    kv = jnp.cumsum(jnp.einsum('bhld,bhle->bhlde', k32, v32), axis=2)
    num = jnp.einsum('bhld,bhlde->bhle', q32, kv)
    den = jnp.einsum('bhld,bhld->bhl', q32, jnp.cumsum(k32, axis=2))
  else:
    kv = jnp.einsum('bhld,bhle->bhde', k32, v32)
    num = jnp.einsum('bhld,bhde->bhle', q32, kv)
    den = jnp.einsum('bhld,bhd->bhl', q32, jnp.sum(k32, axis=2))
  out = num if normalizer == 'padded_length' else num / (den[..., None] + eps)
  return out.astype(v.dtype)


@register_mixer('linear')
class LinearAttention(nn.Module):
  """Linear attention with a positive feature map (`elu+1` or `relu`): memory linear in length.
  `normalizer`: 'keys' (Katharopoulos et al.) or 'padded_length' (the LRA reference code's form,
  family `linear_reference`; see `linear_attention`). No rotary positions (no `rotary` field):
  RoFormer's linear form (Eq. 19) rotates phi(q), phi(k) in the numerator only, another function
  than this one."""
  num_heads: int
  feature_map: str = 'elu+1'
  causal: bool = False
  dropout_rate: float = 0.0  # accepted for interface parity; kernel attention has no weights to drop
  use_bias: bool = True
  dtype: Optional[Dtype] = None
  normalizer: Literal['keys', 'padded_length'] = 'keys'

  @property
  def not_by_design(self) -> dict[str, str]:
    """Properties of poolformers_jax.testing.check_mixer that this mixer does not have, and why."""
    out = {'dropout': 'kernel attention has no weights to drop (dropout_rate is unused)'}
    if self.normalizer == 'padded_length':
      out['padding_amount'] = "normalizer='padded_length' scales by the padded length"
    return out

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, *,
               deterministic: bool = True) -> Array:
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    check_choice(name, 'feature_map', self.feature_map, sorted(FEATURE_MAPS))
    check_choices(self)
    dim = x.shape[-1]
    check_heads(dim, self.num_heads, name)
    dtype = compute_dtype(self.dtype, x)
    dense = lambda n: nn.Dense(dim, use_bias=self.use_bias, dtype=dtype, name=n)
    phi = FEATURE_MAPS[self.feature_map]
    q, k, v = (split_heads(dense(n)(x), self.num_heads) for n in ('query', 'key', 'value'))
    out = linear_attention(phi(q), phi(k), v, mask, self.causal, normalizer=self.normalizer)
    return dense('out')(merge_heads(out))
