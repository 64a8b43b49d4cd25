"""Chunk maxima and their spread back, with the token axis split only at multiples of 8.

PoNet's SMP takes the maximum of each chunk of `size` consecutive tokens and gives it back to
every token of the chunk. Written as a reshape to [chunks, size], a `size` that is not a multiple
of 8 (L // 4096 + 1 tokens: 1 025, 4 097) does not fall on the 8-row tiles XLA:TPU lays arrays out
in, so the reshape, the repeat back and their gradients become copies of the tokens, and at 16M
tokens many of them are live at once (docs/efficiency.md). Here the tokens go into groups of 8,
the groups into groups of 8 (64 tokens), and so on while a group is at most a chunk long: every
reshape splits the axis into [n, 8], and a group holds the end of one chunk and the start of the
next at most, so it keeps two values, one per chunk (`first`: the chunk of its first token, and
the rest). The top groups (a few per chunk) meet their chunks in a segment reduction.

The maximum is exact in any order, so the values are those of the reshape. Its gradient is the
reshape's too (`tiled_max`'s own VJP): the chunk's cotangent divided by the number of its tokens
equal to the maximum (ties share it equally), as `jnp.max`'s gradient is.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

Array = jax.Array
TILE_ROWS = 8   # the rows of a TPU tile: a reshape that splits the tokens into [n, 8] moves nothing
# reduce over a group's 8 members, join two values of one chunk, join the top groups per chunk
_OPS = {'max': (jnp.max, jnp.maximum, jax.ops.segment_max),
        'sum': (jnp.sum, jnp.add, jax.ops.segment_sum)}


def group_sizes(length: int, size: int) -> list[int]:
  """8, 64, ...: the group sizes that divide `length` and are at most `size` tokens (a chunk);
  empty when there is none (then the tiled form does not apply)."""
  sizes = [TILE_ROWS]
  while sizes[-1] <= size and length % sizes[-1] == 0:
    sizes.append(sizes[-1] * TILE_ROWS)
  return sizes[:-1]


def _chunk_of(start: int | Array, size: int) -> Any:
  """The chunk (counted from the shard's first chunk) of the token at position t of the shard."""
  return lambda t: (start + t) // size


def _ends(chunk: Any, group: int, count: int) -> tuple[Array, Array]:
  """The chunks of the first and the last token of each of `count` groups of `group` tokens."""
  first = group * jnp.arange(count)
  return chunk(first), chunk(first + group - 1)


def _expand(where: Array, ndim: int) -> Array:
  """[n, 8] -> [1, n, 8, 1, ...]: to select among [B, n, 8, ...] values."""
  return where.reshape((1,) + where.shape + (1,) * (ndim - 3))


def tiled_reduce(x: Array, start: int | Array, size: int, span: int, op: str,
                 fill: Any) -> Array:
  """[B, span, ...]: `op` ('max' or 'sum') over the tokens of `x` ([B, length, ...]) in each of
  `span` chunks of `size` tokens, the first token `start` tokens into chunk 0; `fill` (the
  identity of `op`) for a chunk without tokens. Needs `group_sizes(length, size)`."""
  reduce, join, segment = _OPS[op]
  batch, length, rest = x.shape[0], x.shape[1], x.shape[2:]
  chunk = _chunk_of(start, size)
  fill = jnp.asarray(fill, x.dtype)
  values, ids = [x], [chunk(jnp.arange(length))]     # each token: one value, in its chunk
  for group in group_sizes(length, size):
    count = length // group
    first, last = _ends(chunk, group, count)
    pooled = []
    for value, chunk_ids in zip(values, ids):         # the members' values and their chunks
      grouped = value.reshape((batch, count, TILE_ROWS) + rest)
      in_first = _expand(chunk_ids.reshape(count, TILE_ROWS) == first[:, None], grouped.ndim)
      pooled.append((reduce(jnp.where(in_first, grouped, fill), axis=2),
                     reduce(jnp.where(in_first, fill, grouped), axis=2)))
    values = [functools.reduce(join, parts) for parts in zip(*pooled)]
    ids = [first, last]                               # a group's two values and their chunks
  top = jax.vmap(lambda v: segment(v, jnp.concatenate(ids), num_segments=span))
  return join(top(jnp.concatenate(values, axis=1)), fill)   # empty chunks: fill


def tiled_spread(per_chunk: Array, start: int | Array, size: int, length: int) -> Array:
  """[B, length, ...]: every token gets its chunk's value of `per_chunk` ([B, span, ...]); the
  chunks as in `tiled_reduce`. The top groups take their two chunks' values, and each level
  down a member takes its group's value of the chunk it starts (or ends) in."""
  sizes = group_sizes(length, size)
  chunk = _chunk_of(start, size)
  batch, rest = per_chunk.shape[0], per_chunk.shape[2:]
  ids = _ends(chunk, sizes[-1], length // sizes[-1])
  values = [jnp.take(per_chunk, i, axis=1, mode='clip') for i in ids]
  for group in reversed(sizes):
    count, member = length // group, group // TILE_ROWS
    first, last = _ends(chunk, member, count * TILE_ROWS)
    opened = [v[:, :, None] for v in values]          # [B, count, 1, ...] against 8 members
    picked = [_pick(opened, member_ids.reshape(count, TILE_ROWS) == ids[0][:, None])
              for member_ids in ((first,) if member == 1 else (first, last))]
    values = [v.reshape((batch, count * TILE_ROWS) + rest) for v in picked]
    ids = (first, last)
  return values[0]


def _pick(opened: list[Array], in_first: Array) -> Array:
  """[B, count, 8, ...]: a group's value of its first chunk where `in_first` ([count, 8]), else
  its value of the other."""
  return jnp.where(_expand(in_first, opened[0].ndim), opened[0], opened[1])


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def tiled_max(x: Array, start: int | Array, size: int, span: int, fill: float) -> Array:
  """`tiled_reduce(x, start, size, span, 'max', fill)`, with the gradient of `jnp.max` over each
  chunk. `fill` must be at most every value of `x` (PoNet's padding value is)."""
  return tiled_reduce(x, start, size, span, 'max', fill)


def _tiled_max_forward(x, start, size, span, fill):
  top = tiled_max(x, start, size, span, fill)
  return top, (x, start, top)


def _tiled_max_backward(size, span, fill, saved, cotangent):
  """Each chunk's cotangent, divided by the count of its values equal to its maximum, goes to
  those tokens: `jax.lax.reduce_max`'s rule on the [chunks, size] reshape, whose chunks the fill
  completes (a chunk of fill only, padding, counts its `size` values)."""
  x, start, top = saved
  length = x.shape[1]
  at_top = x == tiled_spread(top, start, size, length)
  ties = tiled_reduce(at_top.astype(cotangent.dtype), start, size, span, 'sum', 0)
  begins = jnp.arange(span) * size - start          # each chunk's first position on the shard
  held = jnp.clip(jnp.minimum(begins + size, length) - jnp.maximum(begins, 0), 0, size)
  filled = jnp.where(top == fill, (size - held).astype(ties.dtype).reshape(
      (1, span) + (1,) * (top.ndim - 2)), 0)
  ties = ties + filled
  share = tiled_spread(cotangent / ties, start, size, length)
  return jnp.where(at_top, share, jnp.zeros((), share.dtype)), None


tiled_max.defvjp(_tiled_max_forward, _tiled_max_backward)
