"""Swin Transformer (Liu et al., ICCV 2021) and CP-Swin (ContextPool paper, Table 6).

Swin: a 4x4 patch embedding, four stages at resolutions H/4 .. H/32 with patch merging between
them. Each block is pre-LN window attention + MLP; odd blocks shift the windows by half a window
(cyclic shift, masked so tokens that were not neighbours do not attend each other). Window
attention adds a learned relative position bias B[dy, dx] per head (Swin Eq. 4). Layers follow
the official code: LayerNorm eps 1e-5, exact GELU, qkv bias, Linear kernels and the bias table
trunc-normal 0.02, drop-path rising linearly over all blocks; a stage not larger than the window
is one window, never shifted. Swin-B (embed 128, depths (2, 2, 18, 2), heads (4, 8, 16, 32),
window 7, 224 input) has 87.8M parameters (Table 6: 88M).

CP-Swin (`context_pool=True`; where it goes is ours, docs/papers/context_pool.md): ContextPool in
every block right before window attention, on each (shifted) window's tokens under its mask, with
2D positions and n = M^2; m(X) runs on the un-shifted map. Its hidden width: Table 6 gives
CP-Swin-B 89M against 88M, about 1M for 24 blocks; ContextPool's default width (C/16) would add
3.9M, a fixed 8 adds 0.87M (88.6M), so `cp_predictor_dim` defaults to 8.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax.layers.common import (
  NEG_INF,
  Array,
  DropPath,
  Dtype,
  MlpBlock,
  check_image_input,
  compute_dtype,
  window_partition,
  window_reverse,
)
from poolformers_jax.layers.context_pool import WindowContextPool
from poolformers_jax.models.registry import register_model_class

LAYER_NORM_EPS = 1e-5
dense_init = nn.initializers.truncated_normal(0.02)
exact_gelu = functools.partial(nn.gelu, approximate=False)


# ------- Windows, shifts and the relative position index (static numpy: they depend on shapes only)

def relative_position_index(window: int) -> np.ndarray:
  """[M^2, M^2] index into the (2M-1)^2 bias table: (dy + M - 1) * (2M - 1) + (dx + M - 1)."""
  coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing='ij'))
  coords = coords.reshape(2, -1)
  rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (window - 1)
  return rel[..., 0] * (2 * window - 1) + rel[..., 1]


def shifted_window_mask(height: int, width: int, window: int, shift: int) -> np.ndarray:
  """[nW, M^2, M^2] bool, True where two tokens of a shifted window may attend each other: after
  the cyclic shift, the last window row / column holds regions that were not neighbours; each
  region gets a label (the official construction) and only tokens with the same label attend."""
  labels = np.zeros((height, width), np.int32)
  slices = lambda size: (slice(0, size - window), slice(size - window, size - shift),
                         slice(size - shift, None))
  count = 0
  for hs in slices(height):
    for ws in slices(width):
      labels[hs, ws] = count
      count += 1
  windows = window_partition(labels[None, :, :, None], window)[..., 0]  # [nW, M^2]
  return np.asarray(windows[:, :, None] == windows[:, None, :])


def window_and_shift(height: int, width: int, window: int, shift: int) -> tuple[int, int]:
  """A map not larger than the window is one window and is never shifted (official code)."""
  if min(height, width) <= window:
    return min(height, width), 0
  return window, shift


# ------------------------------------------------------------------------------------------- Layers

class WindowAttention(nn.Module):
  """Multi-head self-attention inside windows x [B * nW, M^2, C], with the relative position bias
  (Swin Eq. 4); `allowed`: [nW, M^2, M^2] bool or None (no shift)."""
  num_heads: int
  window: int
  attention_dropout_rate: float = 0.0
  dropout_rate: float = 0.0
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, allowed: Array | None = None, *,
               deterministic: bool = True) -> Array:
    bw, n, c = x.shape
    heads = self.num_heads
    if c % heads:
      raise ValueError(f'WindowAttention: num_heads={heads} does not divide the width {c}.')
    dtype = compute_dtype(self.dtype, x)
    qkv = nn.Dense(3 * c, dtype=dtype, kernel_init=dense_init, name='qkv')(x)
    q, k, v = jnp.moveaxis(qkv.reshape(bw, n, 3, heads, c // heads), (2, 3), (0, 2))
    logits = jnp.einsum('bhqd,bhkd->bhqk', q, k, preferred_element_type=jnp.float32)
    logits = logits * (c // heads) ** -0.5
    table = self.param('relative_position_bias_table', dense_init,
                       ((2 * self.window - 1) ** 2, heads))
    index = relative_position_index(self.window).reshape(-1)
    bias = table[index].reshape(n, n, heads).transpose(2, 0, 1)        # B of Eq. 4
    logits = logits + bias[None]
    if allowed is not None:
      num_windows = allowed.shape[0]
      logits = logits.reshape(bw // num_windows, num_windows, heads, n, n)
      logits = jnp.where(allowed[None, :, None], logits, NEG_INF).reshape(bw, heads, n, n)
    weights = jax.nn.softmax(logits, axis=-1)
    self.sow('intermediates', 'attention_weights', weights)
    weights = nn.Dropout(self.attention_dropout_rate)(weights, deterministic=deterministic)
    out = jnp.einsum('bhqk,bhkd->bqhd', weights.astype(v.dtype), v).reshape(bw, n, c)
    out = nn.Dense(c, dtype=dtype, kernel_init=dense_init, name='proj')(out)
    return nn.Dropout(self.dropout_rate)(out, deterministic=deterministic)


class SwinBlock(nn.Module):
  """x + DropPath(W-MSA / SW-MSA(LN(x))); x + DropPath(MLP(LN(x))) on [B, H, W, C]."""
  num_heads: int
  window: int = 7
  shift: int = 0
  mlp_ratio: float = 4.0
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  context_pool: bool = False
  cp_predictor_dim: int = 8
  cp_size_ratio: float = 0.1
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
    b, h, w, c = x.shape
    window, shift = window_and_shift(h, w, self.window, self.shift)
    if h % window or w % window:
      raise ValueError(f'SwinBlock: feature map {h}x{w} is not divisible by the window '
                       f'{window}; choose an image size that gives multiples of the window.')
    allowed = jnp.asarray(shifted_window_mask(h, w, window, shift)) if shift else None
    y = nn.LayerNorm(LAYER_NORM_EPS, dtype=self.dtype, name='norm1')(x)
    if self.context_pool:
      windows = WindowContextPool(window=window, shift=shift, predictor_dim=self.cp_predictor_dim,
                                  size_ratio=self.cp_size_ratio, dtype=self.dtype,
                                  name='context_pool')(y, allowed)
    else:
      windows = window_partition(jnp.roll(y, (-shift, -shift), axis=(1, 2)) if shift else y,
                                 window)
    windows = WindowAttention(self.num_heads, window, self.attention_dropout_rate,
                              self.dropout_rate, dtype=self.dtype, name='attn')(
                                  windows, allowed, deterministic=deterministic)
    y = window_reverse(windows, window, h, w)
    if shift:
      y = jnp.roll(y, (shift, shift), axis=(1, 2))
    drop_path = DropPath(self.drop_path_rate)
    x = x + drop_path(y, deterministic=deterministic)
    y = nn.LayerNorm(LAYER_NORM_EPS, dtype=self.dtype, name='norm2')(x)
    y = MlpBlock(int(c * self.mlp_ratio), activation=exact_gelu, dropout_rate=self.dropout_rate,
                 dtype=self.dtype, kernel_init=dense_init, name='mlp')(
                     y, deterministic=deterministic)
    return x + drop_path(y, deterministic=deterministic)


class PatchMerging(nn.Module):
  """[B, H, W, C] -> [B, H/2, W/2, 2C]: concat of 2x2 neighbours, LayerNorm, Linear (no bias)."""
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array) -> Array:
    b, h, w, c = x.shape
    if h % 2 or w % 2:
      raise ValueError(f'PatchMerging: feature map {h}x{w} has an odd side; use an image size '
                       f'divisible by patch_size * 2^(num_stages - 1).')
    x = jnp.concatenate([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2],
                         x[:, 1::2, 1::2]], axis=-1)        # official order x0, x1, x2, x3
    x = nn.LayerNorm(LAYER_NORM_EPS, dtype=self.dtype, name='norm')(x)
    return nn.Dense(2 * c, use_bias=False, dtype=self.dtype, kernel_init=dense_init,
                    name='reduction')(x)


class SwinTransformer(nn.Module):
  """Swin / CP-Swin classifier: images [B, H, W, 3] float32 -> logits [B, num_classes]."""
  num_classes: int = 1000
  image_size: int | None = None     # documentation / data size; any divisible size runs
  patch_size: int = 4
  embed_dim: int = 128
  depths: Sequence[int] = (2, 2, 18, 2)
  num_heads: Sequence[int] = (4, 8, 16, 32)
  window_size: int = 7
  mlp_ratio: float = 4.0
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  drop_path_rate: float = 0.5
  context_pool: bool = False
  cp_predictor_dim: int = 8
  cp_size_ratio: float = 0.1
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    name = type(self).__name__
    check_image_input(inputs, name)
    if len(self.depths) != len(self.num_heads):
      raise ValueError(f'{name}: depths {tuple(self.depths)} and num_heads '
                       f'{tuple(self.num_heads)} must have one entry per stage.')
    x = inputs.astype(self.dtype) if self.dtype is not None else inputs
    x = nn.Conv(self.embed_dim, (self.patch_size,) * 2, strides=(self.patch_size,) * 2,
                padding='VALID', dtype=self.dtype, name='patch_embed')(x)
    x = nn.LayerNorm(LAYER_NORM_EPS, dtype=self.dtype, name='patch_norm')(x)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    rates = np.linspace(0.0, self.drop_path_rate, sum(self.depths))
    block_id = 0
    for stage, (depth, heads) in enumerate(zip(self.depths, self.num_heads)):
      if stage > 0:
        x = PatchMerging(dtype=self.dtype, name=f'merge_{stage}')(x)
      for i in range(depth):
        x = SwinBlock(heads, self.window_size, 0 if i % 2 == 0 else self.window_size // 2,
                      self.mlp_ratio, self.dropout_rate, self.attention_dropout_rate,
                      float(rates[block_id]), self.context_pool, self.cp_predictor_dim,
                      self.cp_size_ratio, dtype=self.dtype,
                      name=f'stage_{stage}_block_{i}')(x, deterministic=deterministic)
        block_id += 1
    x = nn.LayerNorm(LAYER_NORM_EPS, dtype=self.dtype, name='norm')(x)
    x = jnp.mean(x.astype(jnp.float32), axis=(1, 2))
    return nn.Dense(self.num_classes, kernel_init=dense_init, name='head')(x)


register_model_class('swin', SwinTransformer)   # context_pool=True: CP-Swin
