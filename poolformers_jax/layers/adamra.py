"""AdaMRA: Adaptive Multi-Resolution Attention (Zhang, Ma, Seidl and Tresp, 2021).

Each of H attention heads sees the keys and values at its own resolution: head h replaces the n
keys / values by m_h = n * c_h segment means (compression rate c_h). A router sends every query to
one head (Eq. 6), and the head attends with kernel attention (Eq. 7), so memory and time are linear
in n (phi(K)^T V is formed first; no [n, n] or [n, m] matrix in the kernel variants). Each head is
split into S subheads (Eq. 8-9), and the routed heads are summed and projected by W^O (Eq. 8).

H is `len(compression_rates)`; the field `num_heads` is S, the subheads of every head (the usual
head width dim / num_heads). What the paper leaves open and what we decided (projections, segments
of the padded length, the router's gradient, random and no routing, the softmax ablation, no
causal form, dropout): docs/papers/adamra.md. Sequence-parallel, each shard sums its tokens into
the segments of the whole sequence they fall in, and the partial sums and counts are all-reduced
at the compressed length ([B, m_h, D] and [B, m_h]); routing and attention are per token.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax.layers.attention import (
  FEATURE_MAPS,
  linear_attention,
  merge_heads,
  softmax_attention,
  split_heads,
)
from poolformers_jax.layers.common import (
  Array,
  Dtype,
  Projection,
  attention_bias,
  check_choices,
  check_heads,
  check_sequence_input,
  compute_dtype,
)
from poolformers_jax.layers.registry import MixerTraits, register_mixer
from poolformers_jax.layers.sequence_parallel import SAME, TOKENS, Shard, map_shards

RANDOM_ROUTING_SEED = 0


def num_segments(length: int, rate: float, name: str = 'AdaMRA') -> int:
  """m_h = floor(n * c_h), the number of landmarks of a head; raises if it is zero."""
  if not 0.0 < rate <= 1.0:
    raise ValueError(f'{name}: compression rate {rate} is not in (0, 1]; '
                     f'use rates like 1/2, 1/8, 1/32.')
  count = math.floor(length * rate + 1e-9)
  if count < 1:
    raise ValueError(f'{name}: compression rate {rate} leaves no segment at length {length} '
                     f'(rate * length < 1); use a rate >= 1/{length} or a longer input.')
  return count


def segment_means(x: Array, mask: Array, count: int, shard: Shard | None = None
                  ) -> tuple[Array, Array]:
  """Means of `x: [B, n, F]` over `count` contiguous segments of ceil(n / count) tokens of the
  whole sequence (on a shard of it, `shard`: partial sums all-reduced).

  The input is right-padded to count * ceil(n / count); padded positions and tokens with
  `mask` False are left out. Returns (means [B, count, F] in x.dtype, valid [B, count] bool),
  valid = the segment holds at least one real token. Sums are taken in float32.
  """
  shard = shard or Shard(1, x.shape[1])
  chunks = shard.chunks(-(-shard.count * shard.length // count), total=count)
  real = mask.astype(bool)
  # jnp.where, not a product, so inf / nan in padding cannot leak into the means; XLA fuses the
  # pad, where and float32 sum into one reduction, so no padded copy of x is materialised.
  sums = chunks.reduce(x, functools.partial(jnp.sum, dtype=jnp.float32), 0, where=real)
  tokens = chunks.reduce(real, jnp.sum, False)
  sums, tokens = shard.psum(chunks.everywhere((sums, tokens)))
  means = sums / jnp.maximum(tokens, 1)[..., None].astype(jnp.float32)
  return means.astype(x.dtype), tokens > 0


def random_routes(length: int, num_routes: int) -> np.ndarray:
  """The fixed, content-independent head of each position for `routing='random'`."""
  return np.random.default_rng(RANDOM_ROUTING_SEED).integers(0, num_routes, size=length)


ROUTED_BLOCK_ROWS = 128


@jax.custom_vjp
def move_rows(x: Array, index: Array, inverse: Array) -> Array:
  """Rows `x[index]` (zeros where `index` is out of range) of a one-to-one row map, whose
  reverse is `inverse` (for every row of x, the output row it went to, out of range for none).
  The gradient is the reverse gather: XLA would otherwise scatter-add, slow on CPU."""
  return jnp.take(x, index, axis=0, mode='fill', fill_value=0)


def _move_rows_fwd(x, index, inverse):
  return move_rows(x, index, inverse), inverse


def _move_rows_bwd(inverse, grad):
  return jnp.take(grad, inverse, axis=0, mode='fill', fill_value=0), None, None


move_rows.defvjp(_move_rows_fwd, _move_rows_bwd)


def routed_layout(chosen: Array, num_routes: int, block_rows: int
                  ) -> tuple[Array, Array, Array]:
  """Each batch row's tokens grouped by routed head, each group padded to whole blocks.

  chosen: [B, n] head of every token. Returns `slot` [B, n] (each token's place in its row's
  layout), `source` [B, P] (the token at each place, n for padding) and `head` [B, P / block_rows]
  (the head of each block); P = block_rows * (ceil(n / block_rows) + H - 1), enough for any
  routing. Rows stay apart, so a batch sharded over devices stays sharded.
  """
  batch, length = chosen.shape
  onehot = jax.nn.one_hot(chosen, num_routes, dtype=jnp.int32)  # [B, n, H]
  rank = jnp.take_along_axis(jnp.cumsum(onehot, axis=1), chosen[..., None], 2)[..., 0] - 1
  sizes = -(-onehot.sum(axis=1) // block_rows) * block_rows      # [B, H], whole blocks
  ends = jnp.cumsum(sizes, axis=1)
  slot = jnp.take_along_axis(ends - sizes, chosen, 1) + rank
  blocks = -(-length // block_rows) + num_routes - 1
  source = jnp.full((batch, blocks * block_rows), length, jnp.int32).at[
      jnp.arange(batch)[:, None], slot].set(jnp.arange(length, dtype=jnp.int32)[None])
  starts = jnp.arange(blocks) * block_rows
  head = jnp.sum(starts[None, :, None] >= ends[:, None, :], axis=2)  # groups ended before it
  return slot, source, jnp.minimum(head, num_routes - 1)


def kernel_attention_state(k: Array, v: Array, valid: Array, phi) -> Array:
  """[B, S, Dh, Dh + 1]: sum_j phi(k_j) v_j^T beside sum_j phi(k_j) (Eq. 7's two sums), float32,
  for keys / values [B, S, m, Dh] of which `valid` [B, m] are real."""
  k = phi(k).astype(jnp.float32) * valid[:, None, :, None]
  kv = jnp.einsum('bsmd,bsme->bsde', k, v.astype(jnp.float32))
  return jnp.concatenate([kv, k.sum(axis=2)[..., None]], axis=-1)


def routed_kernel_attention(x: Array, chosen: Array, kernels: Array, biases: Array | None,
                            states: Array, phi, dtype: Dtype, eps: float = 1e-6) -> Array:
  """Eq. 7 for each query in its routed head only -> [B, n, D] in `dtype`.

  x [B, n, D] is projected by its head's query map (kernels [H, D, D], biases [H, D] or None)
  and attends to that head's state (states [B, H, S, Dh, Dh + 1], kernel_attention_state).
  Each row's tokens are grouped by head into blocks of one head (routed_layout), so the work is
  one head's per token, not H heads' of which H - 1 are thrown away; same values as
  linear_attention.
  """
  batch, length, dim = x.shape
  num_routes, subheads, head_dim = states.shape[1], states.shape[2], states.shape[3]
  # Blocks of at least `dim` rows, so that a block's [dim, dim] query map costs no more to
  # read than its rows; fewer for short inputs.
  block_rows = int(min(max(ROUTED_BLOCK_ROWS, dim), 8 * -(-length // (8 * num_routes))))
  slot, source, head = routed_layout(chosen, num_routes, block_rows)
  blocks = head.shape[1]
  rows = jax.vmap(move_rows)(x, source, slot).reshape(batch, blocks, block_rows, dim)
  q = jnp.einsum('bktd,bkde->bkte', rows.astype(dtype), kernels[head].astype(dtype))
  if biases is not None:
    q = q + biases[head][:, :, None, :].astype(dtype)
  q = phi(q).astype(jnp.float32).reshape(batch, blocks, block_rows, subheads, head_dim)
  state = jnp.take_along_axis(states, head[:, :, None, None, None], axis=1)
  num = jnp.einsum('bktsd,bksde->bktse', q, state)
  out = (num[..., :head_dim] / (num[..., head_dim:] + eps)).astype(dtype)
  return jax.vmap(move_rows)(out.reshape(batch, blocks * block_rows, dim), slot, source)


@register_mixer('adamra')
class AdaMRA(nn.Module):
  """Adaptive multi-resolution kernel attention; mixer interface of docs/design.md.

  No rotary positions (no `rotary` field): its keys are segment means, which have no single
  position, and its kernel feature map sits between q . k and the positions.
  """
  num_heads: int                     # subheads S of every resolution head (width dim / S)
  compression_rates: Sequence[float] = (1 / 2, 1 / 8, 1 / 32)   # c_h of each of the H heads
  routing: Literal['learned', 'random', 'none'] = 'learned'      # 'learned': Eq. 6
  # How learned routing carries a gradient: output x P (Switch Transformer), or x 1 with the
  # gradient of x P.
  router_gate: Literal['probability', 'straight_through'] = 'probability'
  # 'elu+1' / 'relu': kernel attention (Eq. 7); 'softmax': the ablation.
  feature_map: Literal['elu+1', 'relu', 'softmax'] = 'relu'
  per_head_projections: bool = True   # the per-head matrices W_hs of Eq. 9
  dropout_rate: float = 0.0
  use_bias: bool = True
  dtype: Dtype | None = None

  traits = MixerTraits(
      padding_amount='its segments are floor(L * rate) chunks of the padded length L',
      sequence_parallel=True,
      sequence_parallel_note='partial segment sums and counts all-reduced, [B, m_h, D] / [B, m_h]')

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *, deterministic: bool = True) -> Array:
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    check_choices(self)
    if len(self.compression_rates) == 0:
      raise ValueError(f'{name}: compression_rates is empty; give one rate per head, '
                       f'e.g. (1/2, 1/8, 1/32).')
    _, length, dim = x.shape
    check_heads(dim, self.num_heads, name)
    counts = [num_segments(length, float(r), name) for r in self.compression_rates]
    dtype = compute_dtype(self.dtype, x)

    # Eq. 1 and Eq. 9 are affine maps applied one after the other, and keys / values are only
    # used as segment means, which commute with them: the maps are multiplied into one [dim, dim]
    # matrix per head, and keys / values are projected from the segment means of x (m_h rows),
    # never at full length. Same values as projecting every token; 3 + 1 full-length products
    # (the heads' queries and W^O) instead of 3 + 3 + 1.
    project = lambda n: Projection(dim, use_bias=self.use_bias, name=n)(dim)
    eq1 = {n: project(n) for n in ('query', 'key', 'value')}
    if self.per_head_projections:  # W_hs of Eq. 9, the S subheads side by side
      init = nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
      eq9 = {n: self.param(f'head_{n}', init, (len(counts), dim, dim))
             for n in ('query', 'key', 'value')}

    def head_map(name: str, h: int) -> tuple[Array, Array | None]:  # W_name (@ W_hs), bias
      kernel, bias = eq1[name]
      if self.per_head_projections:
        kernel = kernel @ eq9[name][h]
        bias = None if bias is None else bias @ eq9[name][h]
      return kernel, bias

    def affine(t: Array, kernel_bias: tuple[Array, Array | None]) -> Array:
      kernel, bias = kernel_bias   # t @ W_name (@ W_hs) + bias, in `dtype`
      y = t.astype(dtype) @ kernel.astype(dtype)
      return y if bias is None else y + bias.astype(dtype)

    chosen, gate = self._route(x, eq1['query'], dtype)  # [B, n] head and weight of each query
    maps = {n: [head_map(n, h) for h in range(len(counts))] for n in ('query', 'key', 'value')}

    def core(shard, x, mask, chosen, gate, maps):
      pooled = [segment_means(x, mask, count, shard) for count in counts]
      heads = [(affine(means, maps['key'][h]), affine(means, maps['value'][h]), valid)
               for h, (means, valid) in enumerate(pooled)]
      if chosen is None or self.feature_map == 'softmax':
        # Every query in every head (routing 'none', or the softmax ablation), summed with the
        # one-hot gates: Eq. 8 as written.
        mixed = jnp.zeros(x.shape, dtype)
        for h, (k_h, v_h, valid) in enumerate(heads):
          q_h, k_h, v_h = (split_heads(t, self.num_heads)
                           for t in (affine(x, maps['query'][h]), k_h, v_h))
          weight = 1.0 if chosen is None else jnp.where(chosen == h, gate, 0)[..., None]
          mixed = mixed + weight * merge_heads(self._attend(q_h, k_h, v_h, valid))
        return TOKENS(mixed)
      # Each query only in the head it is routed to: a third of the work of evaluating all
      # heads and keeping one (same values; see routed_kernel_attention).
      kernels, query_biases = zip(*maps['query'])
      biases = None if query_biases[0] is None else jnp.stack(query_biases)
      states = [kernel_attention_state(split_heads(k_h, self.num_heads),
                                       split_heads(v_h, self.num_heads), valid,
                                       FEATURE_MAPS[self.feature_map])
                for k_h, v_h, valid in heads]
      return TOKENS(gate[..., None] * routed_kernel_attention(
          x, chosen, jnp.stack(kernels), biases, jnp.stack(states, axis=1),
          FEATURE_MAPS[self.feature_map], dtype))

    mixed = map_shards(core, TOKENS(x), TOKENS(mask), TOKENS(chosen), TOKENS(gate), SAME(maps),
                       owner=name)
    mixed = nn.Dropout(self.dropout_rate)(mixed, deterministic=deterministic)
    return nn.Dense(dim, use_bias=self.use_bias, dtype=dtype, name='out')(mixed)  # W^O of Eq. 8

  def _route(self, x: Array, query: tuple[Array, Array | None], dtype: Dtype
             ) -> tuple[Array | None, Array | None]:
    """(head [B, n] int32, weight [B, n]) of every query; (None, None) for routing 'none'."""
    num_routes = len(self.compression_rates)
    if self.routing == 'none':
      return None, None
    if self.routing == 'random':
      chosen = jnp.broadcast_to(jnp.asarray(random_routes(x.shape[1], num_routes), jnp.int32),
                                x.shape[:2])
      self.sow('intermediates', 'routed_head', chosen)
      return chosen, jnp.ones(x.shape[:2], dtype)
    router, _ = Projection(num_routes, use_bias=False, name='router')(x.shape[-1])
    kernel, bias = query  # Eq. 6 reads Q = x W_Q + b_Q: the router matrix is folded into W_Q
    logits = x.astype(dtype) @ (kernel @ router).astype(dtype)
    if bias is not None:
      logits = logits + (bias @ router).astype(dtype)
    # The barrier keeps XLA:TPU from fusing x @ (W_Q W_R) into the softmax and argmax: that fusion
    # overflows the stack of libtpu's convolution emitter (0.0.42.1; any batch > 1).
    logits = jax.lax.optimization_barrier(logits)
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    chosen = jnp.argmax(probs, axis=-1).astype(jnp.int32)
    self.sow('intermediates', 'router_probs', probs)
    self.sow('intermediates', 'routed_head', chosen)
    # Switch-Transformer gate: the chosen head's output times its probability carries the gradient.
    gate = jnp.take_along_axis(probs, chosen[..., None], -1)[..., 0]
    if self.router_gate == 'straight_through':   # exactly 1 forward (P - P = 0), dP backward
      gate = 1.0 + (gate - jax.lax.stop_gradient(gate))
    return chosen, gate.astype(dtype)

  def _attend(self, q: Array, k: Array, v: Array, valid: Array) -> Array:
    """Attention of all queries [B, S, n, Dh] over the compressed keys [B, S, m, Dh]."""
    if self.feature_map == 'softmax':
      out, _ = softmax_attention(q, k, v, attention_bias(valid))
      return out
    phi = FEATURE_MAPS[self.feature_map]
    return linear_attention(phi(q), phi(k), v, valid, causal=False)  # Eq. 7
