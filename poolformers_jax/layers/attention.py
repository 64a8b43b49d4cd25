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

Both have a sequence-parallel form; what crosses devices is each class's `traits` note (linear
attention: states that do not grow with the length; softmax: all keys and values).
"""
from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers import sequence_parallel
from poolformers_jax.layers.common import (
  NEG_INF,
  Array,
  Dtype,
  apply_rotary,
  attention_bias,
  check_choice,
  check_choices,
  check_heads,
  check_sequence_input,
  compute_dtype,
  segment_allowed,
)
from poolformers_jax.layers.registry import MixerTraits, register_mixer
from poolformers_jax.layers.sequence_parallel import HEAD_TOKENS, SAME, TOKENS, Shard, map_shards


def split_heads(x: Array, num_heads: int) -> Array:
  """[B, L, D] -> [B, H, L, D/H]."""
  b, l, d = x.shape
  return x.reshape(b, l, num_heads, d // num_heads).transpose(0, 2, 1, 3)


def merge_heads(x: Array) -> Array:
  """[B, H, L, Dh] -> [B, L, H*Dh]."""
  b, h, l, dh = x.shape
  return x.transpose(0, 2, 1, 3).reshape(b, l, h * dh)


def softmax_attention(q: Array, k: Array, v: Array, bias: Array,
                      drop: Callable[[Array], Array] | None = None) -> tuple[Array, Array]:
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


def cudnn_unavailable_reason(dtype: Dtype, head_dim: int) -> str | None:
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
  """'auto' -> 'cudnn' or 'xla'; a ValueError for an unknown or impossible choice."""
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


def gather_tokens(shard: Shard, x: Array) -> Array:
  """Every shard's `x` ([B, L/count, ...], tokens on axis 1) in sequence order: [B, L, ...]."""
  every = shard.all_gather(x)                                  # [count, B, L/count, ...]
  return jnp.moveaxis(every, 0, 1).reshape(x.shape[0], -1, *x.shape[2:])


def sharded_allowed(shard: Shard, mask: Array, segment_ids: Array | None,
                    causal: bool) -> tuple[Array, Array]:
  """This shard's queries against all keys: the gathered key mask [B, L] and the allowed
  matrix [B, L/count, L] (real keys; with `causal` keys at global positions <= the query's;
  with packed rows `segment_ids`, keys of the query's own segment)."""
  keys = gather_tokens(shard, mask)
  allowed = jnp.broadcast_to(keys[:, None, :], (mask.shape[0], shard.length, keys.shape[1]))
  if causal:
    allowed = allowed & (shard.positions()[:, None] >= jnp.arange(keys.shape[1])[None, :])
  if segment_ids is not None:
    allowed = allowed & (segment_ids[:, :, None] == gather_tokens(shard, segment_ids)[:, None, :])
  return keys, allowed


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
  dtype: Dtype | None = None
  implementation: Implementation = 'explicit'
  kernel_init: Callable = nn.linear.default_kernel_init   # BERT: normal(0.02)
  dropout_on: Literal['output', 'weights'] = 'output'     # 'weights': explicit only
  rotary: bool = False   # rotary positions on q and k (RoFormer; common.apply_rotary)
  traits = MixerTraits(
      two_d='no (images as flattened patches)',
      sequence_parallel=True,
      sequence_parallel_note=('the quadratic baseline: all keys and values [B, L, D] (and the '
                              'key mask) gathered on every shard, growing with the length; '
                              'queries local'))

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               segment_ids: Array | None = None, deterministic: bool = True) -> Array:
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
    on_weights = self.dropout_on == 'weights'
    drop_weights = on_weights and not deterministic and self.dropout_rate > 0
    if implementation == 'cudnn' and (sequence_parallel.active() or segment_ids is not None):
      # cuDNN takes lengths, not a shard's [L/count, L] mask or packed rows' segments.
      if self.implementation != 'auto':
        raise ValueError(f"{name}: implementation='cudnn' takes lengths, so no packed rows "
                         "(segment_ids) and no sequence shards; use 'auto', 'xla' or 'explicit' "
                         '(or --config.mesh.sequence=1).')
      implementation = 'xla'
    if sequence_parallel.active() and drop_weights:
      raise ValueError(f"{name}: dropout_on='weights' cannot run sequence-sharded (its random "
                       "mask would repeat on every shard); use dropout_on='output' or "
                       '--config.mesh.sequence=1.')
    drop = lambda t: dropout(t, deterministic=deterministic)

    def core(shard, q, k, v, mask, segment_ids):
      if shard.count == 1:
        allowed = None if segment_ids is None else segment_allowed(segment_ids, mask)  # [B, L, L]
        causal = self.causal
      else:   # the quadratic baseline: all keys / values gathered, this shard's queries
        k, v = gather_tokens(shard, k), gather_tokens(shard, v)
        mask, allowed = sharded_allowed(shard, mask, segment_ids, self.causal)
        causal = False   # in `allowed`, at the queries' global positions
      if implementation == 'explicit':
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))
        if shard.count == 1:
          bias = attention_bias(mask, causal)
          if allowed is not None:
            bias = jnp.where(allowed[:, None], bias, NEG_INF)
        else:
          assert allowed is not None   # sharded_allowed's, above
          bias = jnp.where(allowed[:, None], 0.0, NEG_INF).astype(jnp.float32)
        out, weights = softmax_attention(q, k, v, bias, drop if drop_weights else None)
        return HEAD_TOKENS(out), HEAD_TOKENS(weights)   # [B, H, L, Dh], [B, H, L, L]
      heads = lambda t: t.reshape(t.shape[:2] + (self.num_heads, head_dim))   # [B, L, H, Dh]
      return TOKENS(fused_attention(heads(q), heads(k), heads(v),
                                    mask if allowed is None else allowed, causal,
                                    implementation)), SAME(None)

    out, weights = map_shards(core, TOKENS(q), TOKENS(k), TOKENS(v), TOKENS(mask),
                              TOKENS(segment_ids), owner=name)
    if implementation == 'explicit':
      self.sow('intermediates', 'attention_weights', weights)
      out = merge_heads(out if on_weights else drop(out))
    else:
      out = dropout(out.reshape(x.shape[:2] + (dim,)), deterministic=deterministic)
    return dense('out')(out)


# Tokens per chunk of causal linear attention (docs/efficiency.md: step time and memory on a CPU).
CHUNK_SIZE = 64

FEATURE_MAPS: dict[str, Callable[[Array], Array]] = {
    'elu+1': lambda t: jax.nn.elu(t) + 1.0,   # Katharopoulos et al. (2020)
    'relu': jax.nn.relu,
}


def linear_attention(q: Array, k: Array, v: Array, mask: Array, causal: bool,
                     eps: float = 1e-6, normalizer: str = 'keys',
                     shard: Shard | None = None, chunk_size: int = CHUNK_SIZE) -> Array:
  """Kernel attention on feature-mapped `q, k` and `v`, all [B, H, L, Dh]; `mask: [B, L]` removes
  padded keys. Causal sums run over j <= i. Accumulation is in float32.

  normalizer 'keys' (Katharopoulos et al. 2020):
      out_i = phi(q_i) . sum_j phi(k_j) v_j^T / phi(q_i) . sum_j phi(k_j)
  normalizer 'padded_length' (the Nystromformer / PoNet LRA code, attention_linear.py): no
  normaliser; phi(q) and phi(k) are each scaled by L^(-1/4), L the padded length of the input:
      out_i = phi(q_i) . sum_j phi(k_j) v_j^T / sqrt(L)
  so the output depends on how much padding the batch carries (not on its values).

  Causal, the sums are chunkwise (`chunkwise_causal`): memory O(L Dh + L / C Dh^2), never the
  [L, Dh, Dh] prefix sums. Sequence-sharded (`shard`: this device's tokens), the sums over keys
  are all-reduced as [B, H, Dh, Dh] / [B, H, Dh] states; causal, the states of the shards before
  this one are gathered (LASP-2). L of 'padded_length' is the whole sequence's.
  """
  shard = shard or Shard(1, q.shape[2])
  k = k * mask[:, None, :, None].astype(k.dtype)
  q32, k32, v32 = (t.astype(jnp.float32) for t in (q, k, v))
  if normalizer == 'padded_length':
    scale = float(shard.count * q.shape[2]) ** -0.25
    q32, k32 = q32 * scale, k32 * scale
  if causal:   # the values carry a column of ones: its sum is the normaliser
    ones = jnp.ones(v32.shape[:-1] + (1,), jnp.float32)
    both = chunkwise_causal(q32, k32, jnp.concatenate([v32, ones], axis=-1), shard, chunk_size)
    num, den = both[..., :-1], both[..., -1]
  else:
    kv = shard.psum(jnp.einsum('bhld,bhle->bhde', k32, v32))
    num = jnp.einsum('bhld,bhde->bhle', q32, kv)
    den = jnp.einsum('bhld,bhd->bhl', q32, shard.psum(jnp.sum(k32, axis=2)))
  out = num if normalizer == 'padded_length' else num / (den[..., None] + eps)
  return out.astype(v.dtype)


def chunkwise_causal(q: Array, k: Array, v: Array, shard: Shard, chunk_size: int) -> Array:
  """sum_{j <= i} (q_i . k_j) v_j for [B, H, L, Dh] q, k and [B, H, L, E] v, in chunks of C
  tokens (fla's `chunk` mode; LASP's intra / inter-chunk split): inside a chunk the masked
  [C, C] product (q_c k_c^T * causal) v_c, plus q_c times the state sum k_j v_j^T of every token
  before the chunk: an exclusive prefix sum of the chunk states [L / C, Dh, E], started by the
  states of the shards before this one. C is min(chunk_size, L); a length that C does not divide
  is padded with zero keys and values at the end, and the output sliced back."""
  b, h, length = q.shape[:3]
  size = min(chunk_size, length)
  chunks = -(-length // size)
  pad = [(0, 0), (0, 0), (0, chunks * size - length), (0, 0)]
  q, k, v = (jnp.pad(t, pad).reshape(b, h, chunks, size, t.shape[-1]) for t in (q, k, v))
  scores = jnp.einsum('bhncd,bhnsd->bhncs', q, k) * jnp.tri(size, dtype=jnp.float32)
  within = jnp.einsum('bhncs,bhnse->bhnce', scores, v)
  states = jnp.einsum('bhncd,bhnce->bhnde', k, v)                       # [B, H, N, Dh, E]
  before = jnp.pad(jnp.cumsum(states[:, :, :-1], axis=2),              # exclusive prefix
                   [(0, 0), (0, 0), (1, 0), (0, 0), (0, 0)])
  if shard.count > 1:   # plus the states of the preceding shards (LASP-2)
    every = shard.all_gather(jnp.sum(states, axis=2))                   # [count, B, H, Dh, E]
    earlier = (jnp.arange(shard.count) < shard.index).astype(jnp.float32)
    before = before + jnp.einsum('c,cbhde->bhde', earlier, every)[:, :, None]
  out = within + jnp.einsum('bhncd,bhnde->bhnce', q, before)
  return out.reshape(b, h, chunks * size, -1)[:, :, :length]


@register_mixer('linear')
class LinearAttention(nn.Module):
  """Linear attention with a positive feature map (`elu+1` or `relu`): memory linear in length.
  `normalizer`: 'keys' (Katharopoulos et al.) or 'padded_length' (the LRA reference code's form,
  family `linear_reference`; see `linear_attention`). No rotary positions (no `rotary` field):
  RoFormer's linear form (Eq. 19) rotates phi(q), phi(k) in the numerator only, another function
  than this one. No dropout field: kernel attention forms no weights to drop (the block drops
  the mixer's output). `chunk_size`: tokens per chunk of the causal form (`chunkwise_causal`);
  the outputs do not depend on it."""
  num_heads: int
  feature_map: str = 'elu+1'
  causal: bool = False
  use_bias: bool = True
  dtype: Dtype | None = None
  normalizer: Literal['keys', 'padded_length'] = 'keys'
  chunk_size: int = CHUNK_SIZE
  traits = MixerTraits(
      padding_amount=lambda o: ("normalizer='padded_length' scales by the padded length"
                                if o['normalizer'] == 'padded_length' else ''),
      sequence_parallel=True,
      sequence_parallel_note=('the key-value state [B, H, Dh, Dh] and normaliser [B, H, Dh], '
                              "all-reduced; causal: every shard's [B, H, Dh, Dh + 1] states "
                              'gathered (LASP-2)'))

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    check_choice(name, 'feature_map', self.feature_map, sorted(FEATURE_MAPS))
    check_choices(self)
    if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or (
        self.chunk_size <= 0):
      raise ValueError(f'{name}: chunk_size={self.chunk_size!r} must be a positive int (tokens '
                       f'per chunk of the causal form, e.g. {CHUNK_SIZE}).')
    dim = x.shape[-1]
    check_heads(dim, self.num_heads, name)
    dtype = compute_dtype(self.dtype, x)
    dense = lambda n: nn.Dense(dim, use_bias=self.use_bias, dtype=dtype, name=n)
    phi = FEATURE_MAPS[self.feature_map]
    q, k, v = (split_heads(dense(n)(x), self.num_heads) for n in ('query', 'key', 'value'))
    core = lambda shard, q, k, v, mask: HEAD_TOKENS(linear_attention(
        q, k, v, mask, self.causal, normalizer=self.normalizer, shard=shard,
        chunk_size=self.chunk_size))
    out = map_shards(core, HEAD_TOKENS(phi(q)), HEAD_TOKENS(phi(k)), HEAD_TOKENS(v), TOKENS(mask),
                     owner=name)
    return dense('out')(merge_heads(out))
