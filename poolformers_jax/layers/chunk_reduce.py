"""The maximum over consecutive chunks of `size` tokens, and each chunk's value back on its tokens,
without reshaping the token axis into [chunks, size].

On a TPU a reshape of [B, chunks * size, D] into [B, chunks, size, D] is free only when `size` is
a multiple of the 8-row tile. PoNet's LRA chunks are L // segment_num + 1 tokens (257, 1025, 4097
...), so XLA:TPU copied each such token-sized array (and its gradient) into another layout and,
from about 1M tokens per chip, staged the copies through extra token-sized buffers held together:
the training step's temporaries grew 7.3x for 4x the tokens (docs/efficiency.md). A window
reduction (window = stride = `size`, `lax.reduce_window`) and a gather of each token's chunk keep
the token axis as it is. Their gradients are written here (each is the other's), so no
select-and-scatter and no `size`-times dilated window sum appears; the maximum's gradient is
`jnp.max`'s (shared evenly by tied maxima).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array


def _window(x: Array, size: int) -> tuple[int, ...]:
  return (1, size) + (1,) * (x.ndim - 2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def spread_chunks(per_chunk: Array, size: int) -> Array:
  """[B, chunks * size, ...]: every token gets its chunk's row of `per_chunk` ([B, chunks, ...])."""
  return per_chunk[:, jnp.arange(per_chunk.shape[1] * size) // size]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def chunk_sum(x: Array, size: int) -> Array:
  """[B, chunks, ...]: the sum of each chunk of `size` tokens of `x` ([B, chunks * size, ...])."""
  window = _window(x, size)
  return lax.reduce_window(x, jnp.zeros((), x.dtype), lax.add, window, window, 'VALID')


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def chunk_max(x: Array, size: int) -> Array:
  """[B, chunks, ...]: the maximum of each chunk of `size` tokens of `x` ([B, chunks * size,
  ...])."""
  window = _window(x, size)
  return lax.reduce_window(x, jnp.asarray(-jnp.inf, x.dtype), lax.max, window, window, 'VALID')


def _spread_forward(per_chunk: Array, size: int) -> tuple[Array, None]:
  return spread_chunks(per_chunk, size), None


def _spread_backward(size: int, _: None, grad: Array) -> tuple[Array]:
  return (chunk_sum(grad, size),)


def _sum_forward(x: Array, size: int) -> tuple[Array, None]:
  return chunk_sum(x, size), None


def _sum_backward(size: int, _: None, grad: Array) -> tuple[Array]:
  return (spread_chunks(grad, size),)


def _max_forward(x: Array, size: int) -> tuple[Array, tuple[Array, Array]]:
  top = chunk_max(x, size)
  return top, (x, top)


def _max_backward(size: int, saved: tuple[Array, Array], grad: Array) -> tuple[Array]:
  x, top = saved
  at_top = x == spread_chunks(top, size)
  ties = chunk_sum(at_top.astype(grad.dtype), size)
  return (jnp.where(at_top, spread_chunks(grad / ties, size), 0).astype(x.dtype),)


spread_chunks.defvjp(_spread_forward, _spread_backward)
chunk_sum.defvjp(_sum_forward, _sum_backward)
chunk_max.defvjp(_max_forward, _max_backward)
