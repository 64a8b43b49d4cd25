"""Each token's chunk maximum by doubling along the tokens, with no reshape of the token axis.

PoNet's SMP takes the maximum of each chunk of `size` consecutive tokens and gives it back to
every token of the chunk. Written as a reshape to [chunks, size] and a repeat back, a `size` off
XLA:TPU's tiles (L // 4096 + 1 tokens: 1 025, 4 097) makes the reshape, the repeat and their
gradients copies of the tokens, many of them live at once at 16M tokens (docs/efficiency.md);
the token axis lies along the tiles' 128 lanes there, so any split of it is a copy. Here every
step is elementwise on the tokens as they lie: a running maximum from the chunk's start and one
from its end, each doubling its reach per step (the token 1, 2, 4, ... before or after, when
still in the chunk: log2(size) steps), and their maximum is the chunk's.

The maximum is exact in any order, so the values are those of the reshape. The gradient is
`jnp.max`'s on the reshape (`chunk_part_max`'s own VJP): the cotangents of a chunk's tokens,
summed, divided by the count of its values equal to its maximum, go to those tokens.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array
# Chunks at least this long take the running maxima; shorter ones the reshape, which XLA:TPU
# fuses there and which is faster on a CPU (log2(size) steps against one reduction); the memory
# of each on the LRA Text step: docs/efficiency.md.
SCAN_FROM = 2048


def _shifted(x: Array, by: int, fill: Any) -> Array:
  """x[t - by] along the tokens (axis 1; x[t + |by|] for a negative `by`), `fill` beyond."""
  widths = [(0, 0, 0)] * x.ndim
  widths[1] = (by, -by, 0)
  return jax.lax.pad(x, jnp.asarray(fill, x.dtype), widths)


def _scan_both_ways(x: Array, into: Array, size: int, join: Any, fill: Any) -> tuple[Array, Array]:
  """(from the chunk's start to t, from t to the chunk's end) of `join` over x's tokens;
  `into` ([L]): each token's place in its chunk."""
  length = x.shape[1]
  lift = lambda where: where.reshape((1, length) + (1,) * (x.ndim - 2))
  before, after, reach = x, x, 1
  while reach < min(size, length):
    before = jnp.where(lift(into >= reach), join(before, _shifted(before, reach, fill)), before)
    after = jnp.where(lift(into + reach < size), join(after, _shifted(after, -reach, fill)), after)
    reach *= 2
  return before, after


def _places(start: int | Array, size: int, length: int) -> Array:
  return (start + jnp.arange(length)) % size


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def chunk_part_max(x: Array, start: int | Array, size: int, fill: float) -> Array:
  """[B, L, ...]: for each token of `x` ([B, L, ...], a shard's tokens, the first `start` into
  its chunk), the maximum of its chunk's tokens on the shard. `fill` is at most every value."""
  before, after = _scan_both_ways(x, _places(start, size, x.shape[1]), size, jnp.maximum, fill)
  return jnp.maximum(before, after)


def _chunk_sum(x: Array, into: Array, size: int) -> Array:
  """Each token: the sum over its chunk's tokens (exact for counts)."""
  before, after = _scan_both_ways(x, into, size, jnp.add, 0)
  return before + after - x


def _forward(x, start, size, fill):
  top = chunk_part_max(x, start, size, fill)
  return top, (x, start, top)


def _backward(size, fill, saved, cotangent):
  """jnp.max's rule on the [chunks, size] reshape, whose chunks the fill completes: a chunk's
  summed cotangent, divided by the count of its values equal to its maximum (the fill's too,
  in a chunk of padding only), goes to its tokens equal to the maximum."""
  x, start, top = saved
  length = x.shape[1]
  into = _places(start, size, length)
  at_top = x == top
  lift = lambda v: v.reshape((1, length) + (1,) * (x.ndim - 2))
  begins = jnp.arange(length) - into                  # each token's chunk's first position
  held = jnp.minimum(begins + size, length) - jnp.maximum(begins, 0)
  filled = jnp.where(top == fill, lift(size - held).astype(cotangent.dtype), 0)
  ties = _chunk_sum(at_top.astype(cotangent.dtype), into, size) + filled
  share = _chunk_sum(cotangent, into, size) / ties
  return jnp.where(at_top, share, jnp.zeros((), share.dtype)), None


chunk_part_max.defvjp(_forward, _backward)
