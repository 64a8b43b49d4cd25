"""HVT hierarchical token pooling (Pan et al., ICCV 2021, "Scalable Vision Transformers with
Hierarchical Pooling"), Sec. 3.2.1. After the first block of every stage the token sequence is
downsampled, Eq. (5):

    X_hat = MaxPool1D(X) + E_stage

`HierarchicalPool` is the pooling, `[B, N, D] -> [B, N', D]` (not a token mixer: it changes the
length, so it returns the pooled mask too); average pooling and a strided convolution are Table 3's
ablations, 2D pooling on the patch grid Table 9's. `PoolingStages` is the network's staging: which
blocks pool (b_m), every stage's token layout, and Eq. (5) in the model's scope (`pool_stage`).
Kernel 3, stride 2, no padding (the official `nn.MaxPool1d(3, 2)`): 196 -> 97 -> 48 -> 23 -> 11
tokens. Masks and the other decisions: docs/papers/hvt.md.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Literal

import flax.linen as nn
import jax.numpy as jnp

from poolformers_jax.layers.common import (
  NEG_INF,
  Array,
  Dtype,
  LearnedPositionEmbedding,
  check_choices,
  check_sequence_input,
  compute_dtype,
)


def pooled_length(length: int, kernel_size: int = 3, stride: int = 2) -> int:
  """Tokens left after one pooling without padding: floor((N - k) / s) + 1."""
  return (length - kernel_size) // stride + 1


class HierarchicalPool(nn.Module):
  """Pools tokens `[B, N, D] -> [B, N', D]` and the mask `[B, N] -> [B, N']`; returns both.

  method: 'max' (the paper's default), 'avg' or 'conv' (Table 3).
  grid: None for 1D pooling; (h, w) to pool 2D on the row-major patch grid (N = h * w).
  """
  method: Literal['max', 'avg', 'conv'] = 'max'
  kernel_size: int = 3
  stride: int = 2
  grid: tuple[int, int] | None = None
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None) -> tuple[Array, Array]:
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    check_choices(self)
    if self.kernel_size < 1 or self.stride < 1:
      raise ValueError(f'{name}: kernel_size={self.kernel_size} and stride={self.stride} '
                       f'must both be >= 1.')
    batch, length, dim = x.shape
    spatial: tuple[int, ...]
    if self.grid is None:
      spatial = (length,)
    else:
      spatial = tuple(self.grid)
      if len(spatial) != 2 or spatial[0] * spatial[1] != length:
        raise ValueError(f'{name}: grid={self.grid} does not hold the {length} tokens; pass '
                         f'grid=(h, w) with h * w == {length}, or grid=None for 1D pooling.')
    if min(spatial) < self.kernel_size:
      raise ValueError(f'{name}: kernel_size={self.kernel_size} is larger than the input '
                       f'{"length" if self.grid is None else "grid"} {spatial}; use fewer pooling '
                       f'stages, a smaller kernel, or a larger image / smaller patch size.')

    window = (self.kernel_size,) * len(spatial)
    strides = (self.stride,) * len(spatial)
    dtype = compute_dtype(self.dtype, x)
    x = x.astype(dtype).reshape(batch, *spatial, dim)
    m = mask.reshape(batch, *spatial, 1)

    if self.method == 'max':
      # Padded tokens never win the max.
      y = nn.max_pool(jnp.where(m, x, jnp.asarray(NEG_INF, dtype)), window, strides, 'VALID')
    elif self.method == 'avg':
      # Average over the real tokens of each window, accumulated in float32.
      m32 = m.astype(jnp.float32)
      total = nn.avg_pool(x.astype(jnp.float32) * m32, window, strides, 'VALID')
      count = nn.avg_pool(m32, window, strides, 'VALID')
      y = (total / jnp.maximum(count, 1e-9)).astype(dtype)
    else:
      y = nn.Conv(dim, window, strides, padding='VALID', dtype=dtype,
                  kernel_init=nn.initializers.truncated_normal(0.02), name='conv')(
                      jnp.where(m, x, jnp.zeros((), dtype)))

    # A pooled token is real when any token of its window is real.
    pooled_mask = nn.max_pool(m.astype(jnp.float32), window, strides, 'VALID') > 0
    y, pooled_mask = y.reshape(batch, -1, dim), pooled_mask.reshape(batch, -1)
    # Where no token of the window is real, return zeros rather than the NEG_INF sentinel.
    y = jnp.where(pooled_mask[..., None], y, jnp.zeros((), y.dtype))
    return y, pooled_mask


@dataclasses.dataclass(frozen=True)
class PoolingStages:
  """HVT's staging (Sec. 3.2.1): `depth` blocks in `num_stages` (M) stages of equal width;
  pooling follows blocks b_m = 0, w, 2w, ... (w = depth / M, the official code). `grid` is the
  (h, w) patch grid; with `pool_2d` the pooling runs on it (HVT Table 9)."""
  depth: int
  num_stages: int
  grid: tuple[int, int]
  pool_2d: bool = False
  method: Literal['max', 'avg', 'conv'] = 'max'
  kernel_size: int = 3
  stride: int = 2

  def pool_after_blocks(self) -> tuple[int, ...]:
    """Indices b_m of the blocks followed by pooling."""
    if self.num_stages == 0:
      return ()
    width = self.depth // self.num_stages
    return tuple(m * width for m in range(self.num_stages))

  def stage_grids(self) -> list[tuple[int, ...]]:
    """Token layout of every stage: (h, w) grids for 2D pooling, (length,) otherwise."""
    layout = tuple(self.grid) if self.pool_2d else (math.prod(self.grid),)
    layouts = [layout]
    for _ in range(self.num_stages):
      layout = tuple(pooled_length(n, self.kernel_size, self.stride) for n in layout)
      layouts.append(layout)
    return layouts

  def stage_grid(self, stage: int) -> tuple[int, int] | None:
    """The (h, w) patch grid of `stage` with 2D pooling; None (a token sequence) otherwise."""
    if not self.pool_2d:
      return None
    h, w = self.stage_grids()[stage]
    return h, w

  def check(self, owner: str) -> None:
    """Refuses a staging that cannot run, before anything is traced."""
    if not self.num_stages:
      return
    if self.depth % self.num_stages:
      raise ValueError(f'{owner}: num_stages={self.num_stages} does not divide depth='
                       f'{self.depth}; HVT splits the blocks into stages of equal width.')
    grids = self.stage_grids()
    if min(min(g) for g in grids[:-1]) < self.kernel_size or min(grids[-1]) < 1:
      raise ValueError(f'{owner}: {self.num_stages} pooling stages with kernel '
                       f'{self.kernel_size} do not fit the {grids[0]} patch tokens; use fewer '
                       f'stages or a larger image / smaller patch size.')

  def pool_stage(self, stage: int, x: Array, mask: Array,
                 dtype: Dtype | None = None) -> tuple[Array, Array]:
    """Eq. (5), X^ = Pool(X) + E_stage, inside the model's compact __call__: the parameters
    'pool{stage}' and 'pos_embed_stage{stage + 1}' are the model's own."""
    x, mask = HierarchicalPool(self.method, self.kernel_size, self.stride,
                               grid=self.stage_grid(stage),
                               dtype=dtype, name=f'pool{stage}')(x, mask)
    return LearnedPositionEmbedding(x.shape[1], name=f'pos_embed_stage{stage + 1}')(x), mask
