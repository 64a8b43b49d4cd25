"""2D self-attention, Self-Attentive Convolutions (SAC) and Multiscale SAC (Barkan, "Multiscale
Self Attentive Convolutions for Vision and Language Modeling").

* `SelfAttention2D` (Sec. 2, Eqs. 1-4): every pixel attends every pixel, with a learned bias
  b[|Δrow|, |Δcol|] added to the scaled scores; without the bias it is softmax attention on the
  flattened image (parameters named as in `MultiHeadAttention`).
* `SAC` (Sec. 3): the query/key/value 1×1 filters become n×m convolutions, so each position stands
  for the n×m patch around it, and patches attend all other patches (global attention).
  Optionally a regular n×m convolution runs in parallel, fused by a 1×1 convolution.
* `MSAC` (Sec. 4): several SACs with different windows in parallel, concatenated, 1×1 reduce.
* Language form (Sec. 5): the same classes take [B, N, D] as a 1×N image with 1×m windows.
* `CrossAttentiveInput` (Sec. 6.1): two images side by side, t = [x, z], with segment augmentation.

What the paper leaves open and what we decided (the window offsets are XLA's 'SAME' padding, full-
width heads, the relative bias table, the causal language form, masks, the two 1×1 reductions
`out` and `fuse`, dropout): docs/papers/msac.md. Lemma 1, tested: SAC with window 1×1 and no
regular conv equals SelfAttention2D with the same weights (conv kernels [1, 1, d, f] = Dense
kernels [d, f]), bias included.
"""
from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Literal

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from poolformers_jax.layers.attention import merge_heads, softmax_attention, split_heads
from poolformers_jax.layers.common import (
  Array,
  Dtype,
  attention_bias,
  check_choice,
  check_choices,
  check_heads,
  check_sequence_input,
  compute_dtype,
)
from poolformers_jax.layers.registry import MixerTraits, module_fields, register_mixer

Window = int | Sequence[int]


# ------------------------------------------------------------------------------------ Shared pieces

def relative_distance_indices(rows: int, cols: int, table_rows: int,
                              table_cols: int) -> tuple[Array, Array]:
  """Indices [rows*cols, rows*cols] of b_{|i-r|, |j-t|} (Eq. 3), clipped to the table size;
  computed from iotas (at 16K tokens two [L, L] int32 constants would be 2 GiB of program)."""
  r, c = jnp.arange(rows, dtype=jnp.int32), jnp.arange(cols, dtype=jnp.int32)
  d_row = jnp.minimum(jnp.abs(r[:, None] - r[None, :]), table_rows - 1)   # [N, N]
  d_col = jnp.minimum(jnp.abs(c[:, None] - c[None, :]), table_cols - 1)   # [M, M]
  # Query (i, j) is row i*cols + j, key (r, t) is column r*cols + t.
  d_row = jnp.broadcast_to(d_row[:, None, :, None], (rows, cols, rows, cols))
  d_col = jnp.broadcast_to(d_col[None, :, None, :], (rows, cols, rows, cols))
  n = rows * cols
  return d_row.reshape(n, n), d_col.reshape(n, n)


def relative_position_bias(table: Array, rows: int, cols: int) -> Array:
  """table [heads, R, C] -> additive bias [1, heads, rows*cols, rows*cols] (float32)."""
  d_row, d_col = relative_distance_indices(rows, cols, table.shape[1], table.shape[2])
  return table[:, d_row, d_col][None].astype(jnp.float32)


def attention_on_grid(q: Array, k: Array, v: Array, num_heads: int,
                      bias: Array) -> tuple[Array, Array]:
  """Multi-head attention of every grid position over every grid position (Eqs. 2-4): q, k, v
  [B, N, M, F] (Eq. 1's filters), bias broadcastable to [B, heads, NM, NM] -> (y* [B, N, M, F],
  the weights a)."""
  b, rows, cols, _ = q.shape
  flat = lambda t: split_heads(t.reshape(b, rows * cols, t.shape[-1]), num_heads)
  out, weights = softmax_attention(flat(q), flat(k), flat(v), bias)  # Eqs. 2-4, softmax in f32
  return merge_heads(out).reshape(b, rows, cols, -1), weights


# Sec. 2.1: full-width filters per head ('full'), or the channels split over the heads (MHA).
HeadForm = Literal['full', 'split']
SegmentForm = Literal['add', 'concat', 'none']   # CrossAttentiveInput's segment augmentation


def head_channels(features: int, num_heads: int, heads: HeadForm, name: str) -> int:
  """Channels of the query / key / value filters: C * d_o with full-width heads (Sec. 2.1,
  heads='full'), or `features` split evenly over the heads (heads='split')."""
  check_choice(name, 'heads', heads, typing.get_args(HeadForm))
  if heads == 'full':
    return features * num_heads
  check_heads(features, num_heads, name)
  return features


def _relative_bias_param(module: nn.Module, num_heads: int, table_rows: int,
                         table_cols: int) -> Array:
  """The 'relative_bias' table [heads, R, C]; same name in SelfAttention2D and SAC."""
  return module.param('relative_bias', nn.initializers.truncated_normal(0.02),
                      (num_heads, table_rows, table_cols))


# ----------------------------------------------------------------------- 2D self-attention (Sec. 2)

class SelfAttention2D(nn.Module):
  """Multi-head 2D self-attention on images [B, H, W, C] -> [B, H, W, C] (Sec. 2, Eqs. 1-4);
  `heads='split'` without relative bias is MultiHeadAttention on the flattened image."""
  num_heads: int
  heads: HeadForm = 'full'
  relative_bias: bool = True
  max_distance: int = 64
  dropout_rate: float = 0.0
  use_bias: bool = True
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
    name = type(self).__name__
    if x.ndim != 4:
      raise ValueError(f'{name}: expected an image [batch, height, width, channels], got rank '
                       f'{x.ndim} shape {tuple(x.shape)}; for tokens [B, L, D] use '
                       f'MultiHeadAttention.')
    dim = x.shape[-1]
    inner = head_channels(dim, self.num_heads, self.heads, name)
    dtype = compute_dtype(self.dtype, x)
    dense = lambda f, n: nn.Dense(f, use_bias=self.use_bias, dtype=dtype, name=n)
    q, k, v = (dense(inner, n)(x) for n in ('query', 'key', 'value'))     # Eq. 1 (1×1 filters)
    bias = jnp.zeros((), jnp.float32)
    if self.relative_bias:                                                 # b of Eq. 3
      table = _relative_bias_param(self, self.num_heads, self.max_distance, self.max_distance)
      bias = relative_position_bias(table, x.shape[1], x.shape[2])
    y, weights = attention_on_grid(q, k, v, self.num_heads, bias)          # Eqs. 2-4
    self.sow('intermediates', 'attention_weights', weights)
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return dense(dim, 'out')(y)                                            # H_Y, Sec. 2.1


# ----------------------- Self-attentive convolutions (Sec. 3) and their multiscale version (Sec. 4)

def window_shape(window: Window, language: bool, name: str) -> tuple[int, int]:
  """int w -> (1, w) for language, (w, w) for images; (n, m) kept. Validates positivity."""
  shape: tuple[int, ...]
  if isinstance(window, (int, np.integer)):
    shape = (1, int(window)) if language else (int(window), int(window))
  else:
    shape = tuple(int(w) for w in window)
  if len(shape) != 2 or min(shape) < 1:
    raise ValueError(f'{name}: window {window!r} must be a positive int or a pair (n, m) of '
                     f'positive ints.')
  if language and shape[0] != 1:
    raise ValueError(f'{name}: window {shape[0]}×{shape[1]} has n={shape[0]} rows, but the '
                     f'language form is a 1×N image; use a window of 1×m (an int m).')
  return shape


def split_forms(x: Array, mask: Array | None, causal: bool, strides: int,
                name: str) -> tuple[Array, Array | None, bool]:
  """Validates a SAC/MSAC input; returns (image [B, N, M, D], key mask or None, is_language)."""
  if x.ndim == 3:
    mask = check_sequence_input(x, mask, name)
    if strides != 1:
      raise ValueError(f'{name}: strides={strides} is not supported in the language form '
                       f'[B, L, D] (the output must keep one vector per token); use strides=1.')
    x = jnp.where(mask[..., None], x, jnp.zeros((), x.dtype))  # padding = zeros outside the signal
    return x[:, None], mask, True
  if x.ndim == 4:
    if mask is not None:
      raise ValueError(f'{name}: masks are only supported in the language form [B, L, D]; '
                       f'got an image of shape {tuple(x.shape)} with a mask; pass mask=None.')
    if causal:
      raise ValueError(f'{name}: causal=True is only defined for the language form [B, L, D]; '
                       f'got an image of shape {tuple(x.shape)}.')
    return x, None, False
  raise ValueError(f'{name}: expected [batch, length, dim] (language) or [batch, height, width, '
                   f'channels] (vision), got rank {x.ndim} shape {tuple(x.shape)}.')


class SACOptions(nn.Module):
  """The options SAC and MSAC share (one list; MSAC hands them to each of its SACs)."""
  traits = MixerTraits(
      shapes=('`[B, L, D]` → `[B, L, D]`; or images `[B, H, W, C]` → `[B, H / strides, '
              'W / strides, features or C]`'),
      mask='yes (sequences)', two_d='yes: an image input is the 2-D form',
      sequence_parallel=False,
      sequence_parallel_note=('its windows would take a halo, but the attention between the '
                              'patches is global softmax attention over every token (Sec. 3), so '
                              "each shard would need the whole sequence's keys and values"))
  num_heads: int
  features: int | None = None      # output channels; None = the input's
  heads: HeadForm = 'full'
  strides: int = 1
  regular_conv: bool = False          # Sec. 3: fuse a regular n×m convolution in
  relative_bias: bool = True          # b of Eq. 3
  max_distance: int = 64              # relative bias table size per axis
  causal: bool = False                # language form only
  dropout_rate: float = 0.0           # on the attention output
  use_bias: bool = True
  dtype: Dtype | None = None


@register_mixer('sac')
class SAC(SACOptions):
  """Self-Attentive Convolution (Sec. 3): 2D self-attention between n×m patches.

  Vision: [B, H, W, C] -> [B, H', W', features]  (H' = ceil(H / strides)).
  Language: [B, L, D] (+ mask [B, L]) -> [B, L, features], a 1×L image with 1×m windows.
  `window`: int w (1×w for language, w×w for images) or a pair (n, m). Positions between patches
  are its relative bias b (no rotary form)."""
  window: Window = 1

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    name = type(self).__name__
    image, key_mask, language = split_forms(x, mask, self.causal, self.strides, name)
    n, m = window_shape(self.window, language, name)
    rows, cols = image.shape[1:3]
    if n > rows or m > cols:
      raise ValueError(f'{name}: window {n}×{m} is larger than the input {rows}×{cols}; '
                       f'use a smaller window or a larger input.')
    features = self.features or x.shape[-1]
    inner = head_channels(features, self.num_heads, self.heads, name)
    dtype = compute_dtype(self.dtype, x)
    # Def. 1 'same' padding; causal windows [t-m+1, t] look only back.
    padding = ((0, 0), (m - 1, 0)) if self.causal else 'SAME'

    def conv(feat, kernel, label):
      return nn.Conv(feat, kernel, strides=self.strides, padding=padding, use_bias=self.use_bias,
                     dtype=dtype, name=label)

    q, k, v = (conv(inner, (n, m), label)(image) for label in ('query', 'key', 'value'))  # Eq. 1
    out_rows, out_cols = q.shape[1:3]
    bias = jnp.zeros((), jnp.float32)
    if key_mask is not None:
      bias = attention_bias(key_mask, self.causal)           # padded keys, and causality
    if self.relative_bias:                                    # b of Eq. 3 on the output grid
      table_rows = 1 if language else self.max_distance
      table = _relative_bias_param(self, self.num_heads, table_rows, self.max_distance)
      bias = bias + relative_position_bias(table, out_rows, out_cols)
    y, weights = attention_on_grid(q, k, v, self.num_heads, bias)   # Eqs. 2-4 between patches
    self.sow('intermediates', 'attention_weights', weights)
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    y = nn.Dense(features, use_bias=self.use_bias, dtype=dtype, name='out')(y)  # H_Y, Sec. 2.1
    if self.regular_conv:
      # Sec. 3: y' = x ⋆ H_R in parallel; γ = [y, y'] ⋆ H_Y (a 1×1 convolution).
      y_regular = conv(features, (n, m), 'regular_conv')(image)
      y = nn.Dense(features, use_bias=self.use_bias, dtype=dtype, name='fuse')(
          jnp.concatenate([y, y_regular], axis=-1))
    return y[:, 0] if language else y


@register_mixer('msac')
class MSAC(SACOptions):
  """Multiscale SAC (Sec. 4): SACs with different windows in parallel, ψ = [γ^1..γ^L],
  φ = ψ ⋆ H_φ. `windows`: an int or (n, m) per scale; (1, 2, 3) is the paper's language example."""
  windows: Sequence[Window] = (1, 2, 3)
  regular_conv: bool = True

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               deterministic: bool = True) -> Array:
    name = type(self).__name__
    if not len(self.windows):
      raise ValueError(f'{name}: windows is empty; give at least one window, e.g. (1, 3).')
    features = self.features or x.shape[-1]
    options = {**{f: getattr(self, f) for f in module_fields(SACOptions)}, 'features': features}
    scales = [SAC(window=w, name=f'sac_{i}', **options)(x, mask, deterministic=deterministic)
              for i, w in enumerate(self.windows)]
    psi = jnp.concatenate(scales, axis=-1)                          # ψ, the super-tensor
    return nn.Dense(features, use_bias=self.use_bias, dtype=compute_dtype(self.dtype, x),
                    name='reduce')(psi)                             # φ = ψ ⋆ H_φ


# ------------------------------------------------ Cross-attentive image similarity input (Sec. 6.1)

class CrossAttentiveInput(nn.Module):
  """t = [x, z] side by side ([B, N, M, d] twice -> [B, N, 2M, d']) with segment augmentation:
  learned x_seg, z_seg added ('add', [N, M, d]) or appended as channels ('concat',
  [N, M, segment_dim]); 'none': plain concatenation."""
  segment: SegmentForm = 'add'
  segment_dim: int = 4
  std: float = 0.02

  @nn.compact
  def __call__(self, x: Array, z: Array) -> Array:
    name = type(self).__name__
    check_choices(self)
    if x.ndim != 4 or x.shape != z.shape:
      raise ValueError(f'{name}: expected two images [batch, height, width, channels] of the same '
                       f'shape, got {tuple(x.shape)} and {tuple(z.shape)}.')
    init = nn.initializers.truncated_normal(self.std)
    if self.segment != 'none':
      seg_channels = x.shape[-1] if self.segment == 'add' else self.segment_dim
      shape = x.shape[1:3] + (seg_channels,)
      batch_shape = x.shape[:3] + (seg_channels,)
      x_seg = jnp.broadcast_to(self.param('x_segment', init, shape).astype(x.dtype), batch_shape)
      z_seg = jnp.broadcast_to(self.param('z_segment', init, shape).astype(z.dtype), batch_shape)
      if self.segment == 'add':
        x, z = x + x_seg, z + z_seg
      else:
        x, z = jnp.concatenate([x, x_seg], -1), jnp.concatenate([z, z_seg], -1)
    return jnp.concatenate([x, z], axis=2)   # t = [x, z] ∈ R^{N × 2M × d'}
