"""PoNet: Pooling Network for efficient token mixing in long sequences (Tan et al., ICLR 2022).

The slides give the four parts of the multi-granularity pooling block:
  GA   g = mean_n H_Q[n];  g' = Attention(g, H_K, H_V)                 (slide "Global Aggregation")
  SMP  s^k = max over the tokens of segment k of H_S                   (slide "Segment Max-pooling")
  LMP  L = max-pool of H_L over overlapping windows                    (slide "Local Max-pooling")
  PF   G_n = g' * H_O[n],  S'_n = S_k(n) * H_O[n],  P = G + S' + L     (slide "Pooling Fusion")

What the slides leave open is pinned by the authors' code (lxchtan/PoNet; docs/papers/ponet.md):
the GA value is K itself, no activation in the fusion, padding never wins a max, LRA segments are
chunks of the padded length (explicit `segment_ids`, sentences, override them), the BERT
version's [CLS]/[SEP] `boundary_mask`, no dropout inside the mixer (the block drops its output).
Ablations ("Ablation Analysis") are switches: `use_ga=False`, `use_ga_cross_attention=False`
(w/o SS-GA: g' = g), `use_smp=False`, `use_lmp=False`; a removed term creates no parameters.

The pooling steps are pure functions below so they can be tested alone. Two of them are written
for speed, with the same values (docs/results/ponet_speed.md): GA applies the Q and K projections
to averages of the input instead of to every token, and LMP is a running maximum of shifted copies
(no max-pool window, whose gradient XLA lowers to a scatter).
"""
from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers import sequence_parallel
from poolformers_jax.layers.common import (
  NEG_INF,
  Array,
  Dtype,
  Projection,
  check_heads,
  check_sequence_input,
  compute_dtype,
)
from poolformers_jax.layers.registry import MixerTraits, register_mixer
from poolformers_jax.layers.sequence_parallel import HEAD_TOKENS, SAME, TOKENS, Shard, map_shards


def global_aggregation(x: Array, mask: Array, query: tuple[Array, Array],
                       key: tuple[Array, Array] | None, num_heads: int, *,
                       cross_attention: bool = True,
                       shard: Shard | None = None) -> tuple[Array, Array | None]:
  """GA of the layer input `x: [B, L, D]` with the Q and K projections `query`, `key` =
  (kernel [D, D], bias [D]) and `num_heads` heads (slices of width D / num_heads); `mask: [B, L]`.
  `key` may be None without the second stage (`cross_attention=False`), which does not use it.

  Returns g' [B, D] in float32 (the heads side by side) and the cross-attention weights
  [B, H, L] (None without the second stage, where g' = g).

  GA only averages projected tokens, and averages commute with the (affine) projections, so
  the projections act on averages of x instead of on every token -- the same values as the
  official code without its two [L, D] x [D, D] products:
    g     = mean_i (x_i Wq + bq) = (mean_i x_i) Wq + bq                 (masked mean)
    s_ih  = g_h . k_ih / sqrt(Dh) = x_i . (Wk_h g_h) / sqrt(Dh) + c_h   (c_h: the softmax drops it)
    g'_h  = sum_i w_ih k_ih = (sum_i w_ih x_i) Wk_h + bk_h             (the weights sum to 1)

  On a shard of the sequence (`shard`: this device's tokens) the sums over tokens are
  all-reduced as [B, D] / [B, H] / [B, H, D] partials and the softmax takes the largest score
  of all shards: what crosses devices does not grow with the length.
  """
  batch, length, dim = x.shape
  shard = shard or Shard(1, length)
  head_dim = dim // num_heads
  x32 = jnp.where(mask[..., None], x.astype(jnp.float32), 0.0)  # padding values never matter
  w_q, b_q = (t.astype(jnp.float32) for t in query)
  count = jnp.maximum(shard.psum(jnp.sum(mask, axis=1).astype(jnp.float32)), 1.0)
  g = (shard.psum(jnp.sum(x32, axis=1)) / count[:, None]) @ w_q + b_q  # first stage: mean [B, D]
  if not cross_attention:
    return g, None
  if key is None:
    raise ValueError('global_aggregation: cross_attention=True needs key=(kernel, bias).')
  w_k, b_k = (t.astype(jnp.float32) for t in key)
  w_k = w_k.reshape(dim, num_heads, head_dim)
  probe = jnp.einsum('bhe,dhe->bdh', g.reshape(batch, num_heads, head_dim), w_k)  # Wk_h g_h
  scores = jnp.einsum('bld,bdh->bhl', x32, probe) / jnp.sqrt(jnp.float32(head_dim))
  weights = shard.softmax(jnp.where(mask[:, None, :], scores, NEG_INF))   # over every shard
  pooled = shard.psum(jnp.einsum('bhl,bld->bhd', weights, x32))  # second stage: value = K
  g_prime = jnp.einsum('bhd,dhe->bhe', pooled, w_k) + b_k.reshape(num_heads, head_dim)
  return g_prime.reshape(batch, dim), weights


def _padding_never_wins(x: Array, mask: Array) -> Array:
  return jnp.where(mask[..., None], x, jnp.asarray(NEG_INF, x.dtype))


def segment_max_pool(x: Array, mask: Array, segment_ids: Array) -> Array:
  """SMP with explicit ids: every real token gets the max of H_S over the real tokens of its
  segment. `x: [B, L, D]`, `segment_ids: [B, L]` int in [0, L) (need not be contiguous).
  Padded rows are 0."""
  l = x.shape[1]
  ids = jnp.clip(segment_ids.astype(jnp.int32), 0, l - 1)
  # One row at a time (vmap): the batch stays a batch axis of the scatter and gather, so a
  # batch sharded over devices stays sharded (rows flattened into one scatter made XLA
  # all-reduce a [B*L, D] buffer across the devices in every layer).
  row = lambda xr, ir: jax.ops.segment_max(xr, ir, num_segments=l)[ir]
  pooled = jax.vmap(row)(_padding_never_wins(x, mask), ids)
  return jnp.where(mask[..., None], pooled, 0)


def chunk_segment_ids(length: int, segment_num: int) -> Array:
  """The LRA segments of the official code: seg_len = L // segment_num + 1, id = pos // seg_len."""
  return jnp.arange(length) // (length // segment_num + 1)


def chunk_max_pool(x: Array, mask: Array, segment_num: int, shard: Shard | None = None,
                   scan: bool | None = None) -> Array:
  """SMP over the LRA chunks (`chunk_segment_ids`); equal to `segment_max_pool` with those ids,
  computed without a scatter: a reshape to [chunks, size], or (`scan`; by default for chunks of
  `chunk_scan.SCAN_FROM` tokens or more) running maxima along the tokens, which XLA:TPU does not
  copy (layers/chunk_scan.py). On a shard of the sequence the chunks are those of the whole
  (padded) length, and a chunk that continues on another shard takes the maximum of every
  shard's part (`Chunks.max_everywhere`)."""
  shard = shard or Shard(1, x.shape[1])
  chunks = shard.chunks(shard.count * shard.length // segment_num + 1)
  pooled = chunks.max_everywhere(_padding_never_wins(x, mask), NEG_INF, scan)
  return jnp.where(mask[..., None], pooled, 0)


def local_max_pool(x: Array, mask: Array, window: int = 3, shard: Shard | None = None) -> Array:
  """LMP: max over the window of `window` tokens centred on each token (stride 1, same length),
  counting only tokens where `mask` is True. Rows where `mask` is False are 0.

  A running maximum over the `window` shifted copies, not `reduce_window`: XLA lowers the
  gradient of a max-pool window to a scatter of arg-max indices (slow on CPU and GPU), while a
  `where` chain is elementwise both ways. Like max-pooling, the gradient goes to the first
  maximum of the window (ties keep the earlier token). Sequence-sharded, the window's `window //
  2` neighbours beyond the shard come from the adjacent shards (a halo).
  """
  length, half = x.shape[1], window // 2
  shard = shard or Shard(1, length)
  padded = shard.halo(_padding_never_wins(x, mask), half, half, fill=NEG_INF)
  pooled = padded[:, :length]
  for start in range(1, window):
    candidate = padded[:, start:start + length]
    pooled = jnp.where(candidate > pooled, candidate, pooled)
  return jnp.where(mask[..., None], pooled, 0)


@register_mixer('ponet')
class PoNet(nn.Module):
  """The PoNet token mixer: multi-granularity pooling (GA + SMP + LMP) and pooling fusion.

  No rotary positions (no `rotary` field): its one query-key product is GA's cross-attention,
  whose query is a pooled mean of the whole sequence with no position of its own to be relative
  to; a PoNet model takes positions 'learned', 'sinusoidal' or 'none'."""
  num_heads: int
  segment_num: int  # LRA: ListOps 64, Text 4096, Retrieval 64, Image 32, Pathfinder 1
  local_window: int = 3
  use_ga: bool = True
  use_ga_cross_attention: bool = True
  use_smp: bool = True
  use_lmp: bool = True
  # Every projection's kernel (the BERT version passes normal(0.02), the official init).
  kernel_init: Callable = nn.linear.default_kernel_init
  dtype: Dtype | None = None
  traits = MixerTraits(
      padding_amount=lambda o: ('its LRA segments are chunks of the padded length (segment_num '
                                'of them; with explicit segment_ids it holds)' if o['use_smp']
                                else ''),
      sequence_parallel=True,
      sequence_parallel_note=("GA: all-reduced [B, D] / [B, H] / [B, H, D] partial sums and the "
                              "largest score; SMP: the partial maxima of each shard's two end "
                              'chunks, gathered (none when the chunks divide the shard); LMP: a '
                              'halo of local_window // 2 tokens from each neighbour'),
      # BERT-style inputs: SMP pools each sentence, the [CLS]/[SEP] positions are its boundaries;
      # segment_num is then unused.
      sentence_inputs=('segment_ids', 'boundary_mask'), sentence_options={'segment_num': 1})

  def _check(self, x: Array, segment_ids: Array | None, boundary_mask: Array | None) -> None:
    name, length = type(self).__name__, x.shape[1]
    if not (self.use_ga or self.use_smp or self.use_lmp):
      raise ValueError(f'{name}: use_ga, use_smp and use_lmp are all False, nothing mixes the '
                       f'tokens; keep at least one pooling.')
    if self.segment_num < 1:
      raise ValueError(f'{name}: segment_num={self.segment_num} must be >= 1 '
                       f'(1 = one segment, a global max).')
    if self.use_lmp and (self.local_window < 1 or self.local_window % 2 == 0):
      raise ValueError(f'{name}: local_window={self.local_window} must be a positive odd number '
                       f'so the pooled sequence keeps its length; use 3 as the paper does.')
    if self.use_lmp and self.local_window > length:
      raise ValueError(f'{name}: local_window={self.local_window} is larger than the input length '
                       f'{length}; use a smaller window or a longer input.')
    if self.use_smp and segment_ids is None and self.segment_num > length:
      raise ValueError(f'{name}: segment_num={self.segment_num} is larger than the input length '
                       f'{length} (SMP would pool single tokens); use at most {length} segments '
                       '(the paper: ListOps 64 of 2000 tokens).')
    for arg, value in (('segment_ids', segment_ids), ('boundary_mask', boundary_mask)):
      if value is not None and tuple(value.shape) != tuple(x.shape[:2]):
        raise ValueError(f'{name}: {arg} shape {tuple(value.shape)} does not match input '
                         f'[batch, length] = {tuple(x.shape[:2])}; pass a [B, L] array.')
    if segment_ids is not None and not jnp.issubdtype(segment_ids.dtype, jnp.integer):
      raise ValueError(f'{name}: segment_ids must be integers in [0, length), got dtype '
                       f'{segment_ids.dtype}; cast them with .astype(jnp.int32).')

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               segment_ids: Array | None = None, boundary_mask: Array | None = None,
               deterministic: bool = True) -> Array:
    del deterministic  # no dropout inside the mixer
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    dim = x.shape[-1]
    check_heads(dim, self.num_heads, name)
    self._check(x, segment_ids, boundary_mask)
    dtype = compute_dtype(self.dtype, x)
    dense = lambda n: nn.Dense(dim, dtype=dtype, kernel_init=self.kernel_init, name=n)
    not_boundary = mask if boundary_mask is None else mask & ~boundary_mask.astype(bool)

    # Without GA's second stage (g' = g) K is unused, so it is not created.
    query, key = (Projection(dim, kernel_init=self.kernel_init, name=n)(dim) if use else None
                  for n, use in (('query', self.use_ga), ('key', self.use_ga and
                                                          self.use_ga_cross_attention)))
    h_s = dense('segment')(x) if self.use_smp else None
    gate = dense('gate')(x) if (self.use_ga or self.use_smp) else None
    h_l = dense('local')(x) if self.use_lmp else None
    if self.use_smp and segment_ids is not None and sequence_parallel.active():
      raise ValueError(f'{name}: explicit segment_ids (sentences) cannot be split over sequence '
                       'shards; use the LRA chunks (segment_num) or --config.mesh.sequence=1.')

    def core(shard, *, x, mask, not_boundary, h_s, gate, h_l, segment_ids, query, key):
      gated = jnp.zeros_like(x, dtype)   # (g' + s), times the gate H_O; per shard (x's)
      weights = None
      if self.use_ga:
        g, weights = global_aggregation(x, mask, query, key, self.num_heads,
                                        cross_attention=self.use_ga_cross_attention, shard=shard)
        g = shard.varying(g)   # broadcast below: its gradient is summed over shards at [B, D]
        gated = gated + g[:, None, :].astype(dtype)  # head h of g' meets head h of O
      if self.use_smp:
        s = (chunk_max_pool(h_s, mask, self.segment_num, shard) if segment_ids is None
             else segment_max_pool(h_s, mask, segment_ids))
        gated = gated + jnp.where(not_boundary[..., None], s, 0)
      fused = gated * gate if gate is not None else gated
      if self.use_lmp:
        fused = fused + local_max_pool(h_l, not_boundary, self.local_window, shard)
      return TOKENS(jnp.where(mask[..., None], fused, 0)), HEAD_TOKENS(weights)

    fused, weights = map_shards(
        core, x=TOKENS(x), mask=TOKENS(mask), not_boundary=TOKENS(not_boundary), h_s=TOKENS(h_s),
        gate=TOKENS(gate), h_l=TOKENS(h_l), segment_ids=TOKENS(segment_ids), query=SAME(query),
        key=SAME(key), owner=name)
    if weights is not None:
      self.sow('intermediates', 'ga_weights', weights)
    return dense('out')(fused)
