"""ContextPool (Huang et al., ICML 2022): learn to pool each token's context before attention.

Every token x_i is replaced by a pooled feature of its neighbourhood (sec. 3.2),

    y_i = sum_j x_j w_j g_ij / sum_j w_j g_ij,                                          (Eq. 4)

with pooling weights w and pooling sizes s predicted together by a small network {w, s} = m(X),
and a Gaussian mask g_ij = exp(-(i - j)^2 / (2 sigma_i^2)), sigma_i = r * n * s_i, r = 0.1.
Attention then runs on the pooled tokens (Fig. 2c). Every ablation of Tables 1-3 is an option
(`ContextPoolOptions`). The forms: `ContextPool` (sequences; CP-ViT's patch grid),
`ContextPool2D` (a ConvNet's pooling layer, sec. 4.2), `WindowContextPool` (inside CP-Swin's
windows) and the mixer 'contextpool', `ContextPoolAttention` (pooling, then attention).

What the paper leaves open and what we decided (m(X)'s layers and width, the log-space softmax of
w, the sigmoid of s, n in causal mode, our reading of each ablation, the 2D positions):
docs/papers/context_pool.md. Memory is linear in length (`pool_eq4`'s query blocks); the flops
stay quadratic (sigma_i reaches 0.1 n, so no truncated window gives the same values).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax.layers.attention import Implementation, MultiHeadAttention
from poolformers_jax.layers.common import (
  NEG_INF,
  Array,
  Dtype,
  attention_bias,
  check_choices,
  check_image_input,
  check_sequence_input,
  compute_dtype,
  segment_allowed,
  window_partition,
)
from poolformers_jax.layers.registry import MixerTraits, module_fields, register_mixer

# Localities that need the predicted pooling size s.
SIZED_LOCALITIES = ('gaussian', 'adaptive_window')

QUERY_BLOCK = 256     # ContextPool.query_block's default (the cost: docs/efficiency.md)
SIGMA_MIN = 1e-2      # sigma floor: keeps d log g / d sigma finite; still pools a single token
WINDOW_EDGE = 4.0     # slope of the soft edges of the adaptive window (per token)


class ContextPoolOptions(nn.Module, kw_only=True):
  """The options every ContextPool form inherits (ContextPool, ContextPool2D, WindowContextPool,
  ContextPoolAttention, the translation decoder's step). Keyword-only, so each form keeps its own
  positional fields; a form whose default differs redeclares the field with
  `dataclasses.field(default=..., kw_only=True)`."""
  weights: Literal['learned', 'uniform', 'unnormalized', 'nonlocal'] = 'learned'  # Tables 1-2
  locality: Literal['gaussian', 'none', 'fixed_window', 'adaptive_window',
                    'random_sparse'] = 'gaussian'                               # Tables 1-2
  predictor: Literal['conv', 'mlp', 'attention'] = 'conv'                      # Table 3
  size_ratio: float = 0.1             # r in sigma_i = r n s_i
  predictor_dim: int | None = None  # hidden width of m(X); None -> max(dim // 16, 8)
  window_size: int = 5                # fixed_window size; random_sparse expected count

  @nn.nowrap
  def pool_options(self) -> dict[str, Any]:
    """The options as keyword arguments, to build another form with the same ones."""
    return {f: getattr(self, f) for f in POOL_OPTIONS}

  @nn.nowrap
  def check_pool_options(self) -> None:
    """Raises ValueError for an unknown option string or an invalid number."""
    owner = type(self).__name__
    check_choices(self)
    if self.size_ratio < 0:
      raise ValueError(f'{owner}: size_ratio={self.size_ratio} is negative; use r >= 0 '
                       '(paper: 0.1).')
    if self.predictor_dim is not None and self.predictor_dim < 1:
      raise ValueError(f'{owner}: predictor_dim={self.predictor_dim} must be >= 1 (or None for '
                       'dim//16).')
    if self.window_size < 1:
      raise ValueError(f'{owner}: window_size={self.window_size} must be >= 1 token.')

  @nn.nowrap
  def predict_pooling(self, x: Array, mask: Array, *, causal: bool = False,
                      dtype: Dtype | None = None, segment_ids: Array | None = None
                      ) -> tuple[Array | None, Array | None]:
    """{w, s} = m(X) (sec. 3.2), the submodule 'predictor' of this module's compact __call__:
    x [B, *spatial, C], mask [B, *spatial] -> the float32 logits of w and of s [B, *spatial]
    (None where the variant uses neither)."""
    need_w, need_s = predicted_channels(self.weights, self.locality)
    if not (need_w or need_s):
      return None, None
    raw = PoolingPredictor(self.predictor, predictor_width(x.shape[-1], self.predictor_dim),
                           need_w + need_s, causal=causal, dtype=dtype,
                           name='predictor')(x, mask, segment_ids).astype(jnp.float32)
    return (raw[..., 0] if need_w else None), (raw[..., -1] if need_s else None)

  @nn.nowrap
  def pool(self, x: Array, mask: Array, sites: PoolSites, *, query_x: Array | None = None,
           allowed: Array | None = None, w_logit: Array | None = None,
           s_logit: Array | None = None, query_block: int | None = None) -> Array:
    """Eq. 4 (`pool_eq4`) inside this module's compact __call__, with the non-local weights'
    projections 'theta' (of `query_x`, default x) and 'phi' as its parameters; sows
    'pooling_weights' and 'sigma'."""
    theta = phi = None
    if self.weights == 'nonlocal':
      dim = x.shape[-1]
      theta = nn.Dense(dim, dtype=x.dtype, name='theta')(x if query_x is None else query_x)
      phi = nn.Dense(dim, dtype=x.dtype, name='phi')(x)
    y, intermediates = pool_eq4(self, x, mask, sites, allowed=allowed, w_logit=w_logit,
                                s_logit=s_logit, theta=theta, phi=phi, query_block=query_block)
    for name, value in intermediates.items():
      self.sow('intermediates', name, value)
    return y


# The option names (what ContextPoolAttention and a config's ContextPool dict pass on).
POOL_OPTIONS = tuple(module_fields(ContextPoolOptions))


class PoolingPredictor(nn.Module):
  """m(X): [B, *spatial, C] -> [B, *spatial, num_outputs] raw pooling logits (sec. 3.2); padded
  positions are zeroed before every layer, so they look like the convolution's zero padding."""
  kind: str
  hidden_dim: int
  num_outputs: int
  causal: bool = False
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, mask: Array, segment_ids: Array | None = None) -> Array:
    """`segment_ids` [B, L] (1D packed rows): no window reaches into another segment."""
    keep = mask[..., None].astype(x.dtype)
    x = x * keep
    if segment_ids is not None and self.kind == 'attention':
      raise ValueError("PoolingPredictor: predictor='attention' does not take packed rows "
                       "(segment_ids); use 'conv' or 'mlp', or unpacked data.")
    return getattr(self, f'_{self.kind}')(x, mask, keep, segment_ids)

  @nn.nowrap
  def _conv(self, x, mask, keep, segment_ids=None):
    spatial = x.ndim - 2
    # Causal (1D only): a kernel-3 window covers positions i-2..i.
    padding = [(2, 0)] if self.causal else 'SAME'
    conv: Callable[[int, str], Callable[[Array], Array]]   # (features, name) -> the layer
    if segment_ids is None:
      conv = lambda f, name: nn.Conv(f, (3,) * spatial, padding=padding, dtype=self.dtype,
                                     name=name)
    else:   # the same kernel on each token's own window, neighbours of other segments zeroed
      offsets = (-2, -1, 0) if self.causal else (-1, 0, 1)
      conv = lambda f, name: lambda t: nn.Conv(f, (3,), padding='VALID', dtype=self.dtype,
                                               name=name)(segment_windows(t, segment_ids, offsets)
                                                          ).reshape(t.shape[:2] + (f,))
    h = nn.gelu(conv(self.hidden_dim, 'conv1')(x)) * keep
    return conv(self.num_outputs, 'conv2')(h)

  @nn.nowrap
  def _mlp(self, x, mask, keep, segment_ids=None):
    h = nn.gelu(nn.Dense(self.hidden_dim, dtype=self.dtype, name='fc1')(x))
    return nn.Dense(self.num_outputs, dtype=self.dtype, name='fc2')(h)

  @nn.nowrap
  def _attention(self, x, mask, keep, segment_ids=None):
    shape = x.shape
    x = x.reshape(shape[0], -1, shape[-1])
    q = nn.Dense(self.hidden_dim, dtype=self.dtype, name='query')(x)
    k = nn.Dense(self.hidden_dim, dtype=self.dtype, name='key')(x)
    v = nn.Dense(self.num_outputs, dtype=self.dtype, name='value')(x)
    logits = jnp.einsum('bqd,bkd->bqk', q, k, preferred_element_type=jnp.float32)
    logits = logits * self.hidden_dim ** -0.5 + attention_bias(mask.reshape(shape[0], -1),
                                                               self.causal)[:, 0]
    out = jnp.einsum('bqk,bko->bqo', jax.nn.softmax(logits, axis=-1), v.astype(jnp.float32))
    return out.reshape(shape[:-1] + (self.num_outputs,))


def segment_windows(x: Array, segment_ids: Array, offsets: tuple[int, ...]) -> Array:
  """[B, L, C] -> [B * L, K, C]: the K neighbours x_{i+o} of every token, zero where i + o is
  outside the row or in another segment (so a VALID kernel-K conv on them is the segment-local
  conv with zero padding)."""
  b, length, c = x.shape
  cols = []
  for o in offsets:
    idx = jnp.arange(length) + o
    inside = (idx >= 0) & (idx < length)
    idx = jnp.clip(idx, 0, length - 1)
    same = inside[None] & (segment_ids[:, idx] == segment_ids)
    cols.append(jnp.where(same[..., None], x[:, idx], 0))
  return jnp.stack(cols, 2).reshape(b * length, len(offsets), c)


def _hash_uniform(i: Array, j: Array) -> Array:
  """A fixed pseudo-random number in [0, 1) per (query, key) index pair (uint32 mixing)."""
  u32 = lambda t, c: t.astype(jnp.uint32) * jnp.uint32(c)
  h = u32(i, 0x9E3779B1) ^ u32(j, 0x85EBCA77)
  for shift, mult in ((15, 0x2C1B3C6D), (12, 0x297A2D39), (15, 0x1B873593)):
    h = (h ^ (h >> shift)) * jnp.uint32(mult)
  return (h >> 8).astype(jnp.float32) / float(1 << 24)


def _in_box(offset: Array, size) -> Array:
  """offset [..., D] lies in the half-open box [-size/2, size/2)^D (a window of `size` cells)."""
  return jnp.all((offset >= -size / 2) & (offset < size / 2), axis=-1)


@dataclasses.dataclass(frozen=True)
class PoolSites:
  """Where Eq. 4 pools, over flattened positions (a sequence, a grid, a window, a stride cell)."""
  query_pos: Array        # [Lq, D] the queries' coordinates c_i
  key_pos: Array          # [Lk, D] the keys' coordinates p_j
  n: Array                # [B, Lq] tokens per query: sigma_i = r n_i s_i
  causal: bool = False    # keys j <= i only (used when no `allowed` is given)
  cell: int = 1           # the query's own stride cell, which random_sparse always keeps


def _needed(value: Array | None, name: str, options: ContextPoolOptions) -> Array:
  """`value`, which pool_eq4 needs for the variant `options`; a ValueError when None."""
  if value is None:
    raise ValueError(f'pool_eq4: weights={options.weights!r}, locality={options.locality!r} '
                     f'needs {name}; pass it (ContextPool.predict_pooling computes w and s).')
  return value


def pool_eq4(options: ContextPoolOptions, x: Array, mask: Array, sites: PoolSites, *,
             allowed: Array | None = None, w_logit: Array | None = None,
             s_logit: Array | None = None, theta: Array | None = None,
             phi: Array | None = None, query_block: int | None = None
             ) -> tuple[Array, dict[str, Array]]:
  """Eq. 4 for flattened positions, a pure function of arrays: (y [B, Lq, C], the intermediates
  to sow: 'pooling_weights' and / or 'sigma').

  x [B, Lk, C] keys/values (zero at padding); mask [B, Lk]; allowed [B, Lq, Lk] or None (the real
  keys, and j <= i when sites.causal, built block by block); w_logit [B, Lk] / s_logit [B, Lq]
  the float32 outputs of m(X); theta [B, Lq, C] / phi [B, Lk, C] the non-local projections.
  Each query row needs only its own logits: `query_block` pools that many queries at a time
  under `jax.checkpoint`, so forward and backward hold [B, query_block, Lk] logits, never
  [B, Lq, Lk]. None = all queries in one block."""
  query_pos, key_pos, n, causal, cell = (sites.query_pos, sites.key_pos, sites.n, sites.causal,
                                         sites.cell)
  lq = query_pos.shape[0]
  intermediates = {}
  # Per-key and per-query terms: linear in length, computed once.
  key_logit, values, sigma = None, x, None
  if options.weights == 'learned':
    # log w_j up to a constant, which cancels in the normaliser C(X) of Eq. 4.
    key_logit = _needed(w_logit, 'w_logit', options)
    intermediates['pooling_weights'] = jax.nn.softmax(jnp.where(mask, key_logit, NEG_INF), axis=-1)
  elif options.weights == 'unnormalized':
    w_logit = _needed(w_logit, 'w_logit', options)
    values = x * w_logit[..., None].astype(x.dtype)
    intermediates['pooling_weights'] = w_logit
  if options.locality in SIZED_LOCALITIES:
    s = jax.nn.sigmoid(_needed(s_logit, 's_logit', options))    # s_i in [0, 1]
    sigma = jnp.maximum(options.size_ratio * n * s, SIGMA_MIN)   # sigma_i = r n s_i
    intermediates['sigma'] = sigma

  def pool_rows(rows: dict) -> tuple[Array, Array | None]:
    """y for one block of queries (every per-query array in `rows` sliced to the block)."""
    q_idx, q_pos = rows['index'], rows['pos']
    if rows.get('allowed') is not None:
      ok = rows['allowed']
    else:
      ok = jnp.broadcast_to(mask[:, None, :], (x.shape[0], q_idx.shape[0], x.shape[1]))
      if causal:
        ok = ok & (jnp.arange(x.shape[1])[None, :] <= q_idx[:, None])[None]
    logits = jnp.zeros(ok.shape, jnp.float32)
    nl_weights = None
    if key_logit is not None:
      logits = logits + key_logit[:, None, :]
    if theta is not None:
      phi_k = _needed(phi, 'phi (with theta)', options)
      nl = jnp.einsum('bqd,bkd->bqk', rows['theta'], phi_k,
                      preferred_element_type=jnp.float32) * phi_k.shape[-1] ** -0.5
      nl = jnp.where(ok, nl, NEG_INF)
      nl_weights = jax.nn.softmax(nl, axis=-1)                  # Eq. 3
      logits = logits + nl
    offset = key_pos[None, :, :] - q_pos[:, None, :]            # [Lq, Lk, D], p_j - c_i
    if options.locality == 'gaussian':
      # log g_ij of the Gaussian mask N(i, sigma_i^2).
      logits = logits - jnp.sum(offset ** 2, -1)[None] / (2.0 * rows['sigma'][..., None] ** 2)
    elif options.locality == 'adaptive_window':
      # A box of half-width sigma_i per axis, soft over about one token.
      edge = rows['sigma'][..., None, None] + 0.5 - jnp.abs(offset)[None]
      logits = logits + jnp.sum(jax.nn.log_sigmoid(WINDOW_EDGE * edge), -1)
    elif options.locality == 'fixed_window':
      # Causal windows look back: centre shifted (window-1)/2 tokens into the past.
      shift = (options.window_size - 1) / 2 if causal else 0.0
      ok = ok & _in_box(offset + shift, options.window_size)[None]
    elif options.locality == 'random_sparse':
      k_idx = jnp.arange(key_pos.shape[0])[None, :]
      # Keep about window_size^D of the keys each query may see (n_i tokens in 1D, H*W pixels).
      visible = jnp.sum(ok, axis=-1, keepdims=True).astype(jnp.float32)
      sampled = (_hash_uniform(q_idx[:, None], k_idx)[None]
                 < options.window_size ** offset.shape[-1] / visible)
      ok = ok & (sampled | _in_box(offset, cell)[None])
    # One masked softmax over j = w_j g_ij / sum_j w_j g_ij, max-subtracted (no underflow).
    p = jax.nn.softmax(jnp.where(ok, logits, NEG_INF), axis=-1)
    y = jnp.einsum('bqk,bkc->bqc', p.astype(values.dtype), values,
                   preferred_element_type=jnp.float32)
    return y.astype(x.dtype), nl_weights

  rows = {'index': jnp.arange(lq), 'pos': query_pos, 'allowed': allowed, 'sigma': sigma,
          'theta': theta}
  rows = {k: v for k, v in rows.items() if v is not None}
  if query_block is None or query_block >= lq:
    y, nl_weights = pool_rows(rows)
  else:
    y, nl_weights = _map_query_blocks(pool_rows, rows, lq, query_block)
  if nl_weights is not None:
    intermediates['pooling_weights'] = nl_weights
  return y, intermediates


def _map_query_blocks(fn, rows: dict, length: int, block: int):
  """fn over query blocks of `rows` ([Lq, ...] or [B, Lq, ...]), rematerialised. The queries are
  cut into the fewest equal blocks of at most `block` rows (576 with block 256 -> 3 x 192)."""
  num = -(-length // block)
  block = -(-length // num)
  pad = num * block - length

  def split(key, t):
    axis = 0 if key in ('index', 'pos') else 1                 # batch-free or batch-first
    widths = [(0, 0)] * t.ndim
    widths[axis] = (0, pad)
    fill = 1 if key == 'sigma' else 0                           # any finite sigma
    t = jnp.pad(t, widths, constant_values=fill)
    t = t.reshape(t.shape[:axis] + (num, block) + t.shape[axis + 1:])
    return jnp.moveaxis(t, axis, 0)

  blocks = {k: split(k, v) for k, v in rows.items()}
  if 'index' in blocks:                                         # padded rows: indices >= length
    blocks['index'] = jnp.arange(num * block).reshape(num, block)
  outputs = jax.lax.map(jax.checkpoint(fn), blocks)
  stitch = lambda t: jnp.moveaxis(t, 0, 1).reshape(
      (t.shape[1], num * block) + t.shape[3:])[:, :length]
  return jax.tree.map(stitch, outputs)


def predicted_channels(weights: str, locality: str) -> tuple[bool, bool]:
  """Which of (w, s) the predictor m(X) must output for this variant."""
  return weights in ('learned', 'unnormalized'), locality in SIZED_LOCALITIES


def predictor_width(dim: int, predictor_dim: int | None) -> int:
  return predictor_dim if predictor_dim is not None else max(dim // 16, 8)


class ContextPool(ContextPoolOptions):
  """ContextPool on token sequences: [B, L, D] -> [B, L, D] (mixer interface, Eq. 3-4); sows
  'pooling_weights' (w) and 'sigma' (Gaussian widths)."""
  causal: bool = False
  # Queries pooled at a time (memory linear in length, pool_eq4); None = [L, L] at once.
  query_block: int | None = QUERY_BLOCK
  # Image tokens (CP-ViT, Fig. 3): `prefix_tokens` (the class token, left out) then a raster
  # grid (h, w) of patches, pooled with a 2D Gaussian, sigma = r * max(h, w) * s in patch units
  # (as CP-Swin). None = a 1D sequence.
  token_grid: tuple[int, int] | None = None
  prefix_tokens: int = 0
  dtype: Dtype | None = None
  traits = MixerTraits(not_by_design={'dropout': 'pooling only: no dropout '
                                                 '(ContextPoolAttention drops)'})

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               segment_ids: Array | None = None, deterministic: bool = True) -> Array:
    """`segment_ids` [B, L] (packed rows): every segment is pooled as if it were alone (its own
    n, no pooling or predictor window across segments)."""
    name = type(self).__name__
    mask = check_sequence_input(x, mask, name)
    self.check_pool_options()
    if self.query_block is not None and self.query_block < 1:
      raise ValueError(f'{name}: query_block={self.query_block} must be >= 1 (or None for the '
                       f'[L, L] form).')
    if self.token_grid is not None:
      return self._pool_grid(x, mask, self.token_grid)
    if segment_ids is not None and self.locality == 'random_sparse':
      raise ValueError(f"{name}: locality='random_sparse' samples by row index and does not take "
                       'packed rows (segment_ids); use unpacked data.')
    dtype = compute_dtype(self.dtype, x)
    x = jnp.where(mask[..., None], x, 0).astype(dtype)
    length, dim = x.shape[1:]
    if self.causal:
      n = jnp.cumsum(mask, axis=-1)                             # real tokens at or before i
    else:
      n = jnp.broadcast_to(jnp.sum(mask, -1, keepdims=True), mask.shape)
    allowed = None
    if segment_ids is not None:   # packed rows: an explicit [B, L, L] (split per query block)
      allowed = segment_allowed(segment_ids, mask)
      if self.causal:
        allowed = allowed & jnp.tril(jnp.ones((length, length), bool))[None]
      n = jnp.sum(allowed, axis=-1)                             # the same, within the segment
    n = jnp.maximum(n, 1).astype(jnp.float32)
    w_logit, s_logit = self.predict_pooling(x, mask, causal=self.causal, dtype=dtype,
                                            segment_ids=segment_ids)
    pos = jnp.arange(length, dtype=jnp.float32)[:, None]
    # allowed=None: padding (and causality) are applied block by block, never as [B, L, L].
    return self.pool(x, mask, PoolSites(pos, pos, n, causal=self.causal), allowed=allowed,
                     w_logit=w_logit, s_logit=s_logit, query_block=self.query_block)

  @nn.nowrap
  def _pool_grid(self, x: Array, mask: Array, grid: tuple[int, int]) -> Array:
    """[prefix tokens; h * w raster patches] -> prefix unchanged, patches pooled on the grid."""
    name = type(self).__name__
    h, w = (int(v) for v in grid)
    p = int(self.prefix_tokens)
    if self.causal or x.shape[1] != p + h * w:
      raise ValueError(f'{name}: token_grid={self.token_grid} with prefix_tokens={p} needs '
                       f'{p + h * w} non-causal tokens, got {x.shape[1]} (causal={self.causal}); '
                       'set the grid of the image (image_size / patch_size) or token_grid=None.')
    dtype = compute_dtype(self.dtype, x)
    patches, patch_mask = x[:, p:], mask[:, p:]
    patches = jnp.where(patch_mask[..., None], patches, 0).astype(dtype)
    # m(X) runs along the raster sequence (the same parameters as the 1D form).
    w_logit, s_logit = self.predict_pooling(patches, patch_mask, dtype=dtype)
    rows, cols = jnp.meshgrid(jnp.arange(h, dtype=jnp.float32), jnp.arange(w, dtype=jnp.float32),
                              indexing='ij')
    pos = jnp.stack([rows.reshape(-1), cols.reshape(-1)], -1)       # [h * w, 2] patch coordinates
    n = jnp.full(patch_mask.shape, float(max(h, w)))
    y = self.pool(patches, patch_mask, PoolSites(pos, pos, n), w_logit=w_logit, s_logit=s_logit,
                  query_block=self.query_block)
    return jnp.concatenate([x[:, :p].astype(y.dtype), y], axis=1)


class ContextPool2D(ContextPoolOptions):
  """ContextPool in place of a stride-`stride` pooling layer: [B, H, W, C] -> [B, H/s, W/s, C];
  w is predicted at every input pixel, s at every output cell (averaged over the cell)."""
  stride: int = 2
  window_size: int = dataclasses.field(default=3, kw_only=True)   # pixels (sequences: 5 tokens)
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, *, deterministic: bool = True) -> Array:
    name = type(self).__name__
    check_image_input(x, name)
    self.check_pool_options()
    b, h, w, c = x.shape
    s = self.stride
    if s < 1 or h % s or w % s:
      raise ValueError(f'{name}: image size {h}x{w} is not divisible by stride={s}; '
                       f'pad or crop the feature map, or pick a stride that divides it.')
    dtype = compute_dtype(self.dtype, x)
    x = x.astype(dtype)
    ho, wo = h // s, w // s
    cells = lambda t: nn.avg_pool(t, (s, s), strides=(s, s))
    query_x = cells(x).reshape(b, ho * wo, c)
    w_logit, s_logit = self.predict_pooling(x, jnp.ones((b, h, w), bool), dtype=dtype)
    # w lives at input pixels, s at output cells: average the s logits over each cell.
    w_logit = None if w_logit is None else w_logit.reshape(b, h * w)
    s_logit = None if s_logit is None else cells(s_logit[..., None]).reshape(b, ho * wo)
    grid = lambda size, step: jnp.arange(size, dtype=jnp.float32) * step + (step - 1) / 2
    coords = lambda hh, ww, step: jnp.stack(jnp.meshgrid(grid(hh, step), grid(ww, step),
                                                         indexing='ij'), -1).reshape(-1, 2)
    n = jnp.full((b, ho * wo), float(max(h, w)))
    allowed = jnp.ones((b, ho * wo, h * w), bool)
    x_flat = x.reshape(b, h * w, c)
    y = self.pool(x_flat, jnp.ones((b, h * w), bool),
                  PoolSites(coords(ho, wo, s), coords(h, w, 1), n, cell=s), query_x=query_x,
                  allowed=allowed, w_logit=w_logit, s_logit=s_logit)
    return y.reshape(b, ho, wo, c)


class WindowContextPool(ContextPoolOptions):
  """ContextPool (Eq. 4) inside each (shifted) window of CP-Swin: the block's normalised map
  [B, H, W, C] (un-shifted) -> the pooled window tokens [B * nW, M^2, C] (window_partition)."""
  window: int  # type: ignore[misc]  # mypy misses predictor_dim's kw_only (a dataclasses.field)
  shift: int = 0
  # CP-Swin's fixed predictor width (the Swin model says why; the other forms: dim // 16).
  predictor_dim: int = dataclasses.field(default=8, kw_only=True)
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, allowed: Array | None = None) -> Array:
    self.check_pool_options()
    b, h, w, c = x.shape
    m = self.window
    cyclic = lambda t: jnp.roll(t, (-self.shift, -self.shift), axis=(1, 2)) if self.shift else t
    tokens = window_partition(cyclic(x), m)                         # [B nW, M^2, C]
    bw, n = tokens.shape[:2]
    # m(X) on the un-shifted map, then shifted and partitioned like the tokens.
    w_logit, s_logit = self.predict_pooling(x, jnp.ones((b, h, w), bool), dtype=self.dtype)
    to_windows = lambda t: None if t is None else window_partition(cyclic(t[..., None]), m)[..., 0]
    w_logit, s_logit = to_windows(w_logit), to_windows(s_logit)      # [B nW, M^2]
    if allowed is None:
      pair_allowed = jnp.ones((bw, n, n), bool)
    else:
      pair_allowed = jnp.tile(jnp.asarray(allowed), (b, 1, 1))       # window index = b*nW + w
    grid = np.stack(np.meshgrid(np.arange(m), np.arange(m), indexing='ij'), -1)
    pos = jnp.asarray(grid.reshape(-1, 2), jnp.float32)              # (row, col) in the window
    tokens_per_window = jnp.full((bw, n), float(n))                  # n of sigma_i = r n s_i
    return self.pool(tokens, jnp.ones((bw, n), bool), PoolSites(pos, pos, tokens_per_window),
                     allowed=pair_allowed, w_logit=w_logit, s_logit=s_logit)


@register_mixer('contextpool')
class ContextPoolAttention(ContextPoolOptions):
  """ContextPool then softmax multi-head attention; q, k and v all come from the pooled tokens.

  `placement` (both readings of the paper, docs/papers/context_pool.md): 'mixer_input' (§1,
  the default) pools LN(X) inside the residual branch; 'block_output' (Fig. 2c) makes this mixer
  plain attention, and `TransformerBlock` replaces the block's output X_l by ContextPool(X_l)
  (`block_output`). Parameters either way: 'context_pool' (m(X)) and 'attention' (as
  MultiHeadAttention).
  """
  traits = MixerTraits(
      two_d=('yes: `token_grid=(H, W)` pools on the patch grid, `prefix_tokens` (class token) '
             'kept out'),
      sequence_parallel=False,
      sequence_parallel_note=("Eq. 4's Gaussian weighs every token (sigma_i = r n s_i reaches "
                              'r n tokens of the whole length, and its support is unbounded, so no '
                              'halo gives the same values) and the softmax attention after it is '
                              'global'))
  num_heads: int
  causal: bool = False
  dropout_rate: float = 0.0
  use_bias: bool = True
  query_block: int | None = QUERY_BLOCK     # ContextPool's
  implementation: Implementation = 'explicit'  # the attention's (MultiHeadAttention)
  placement: Literal['mixer_input', 'block_output'] = 'mixer_input'   # see above
  token_grid: tuple[int, int] | None = None  # ContextPool's (CP-ViT: set by the backbone)
  prefix_tokens: int = 0
  dtype: Dtype | None = None
  rotary: bool = False   # the attention's rotary positions (on the pooled tokens' q and k)

  def setup(self):
    check_choices(self)
    self.context_pool = ContextPool(causal=self.causal, dtype=self.dtype,
                                    query_block=self.query_block, token_grid=self.token_grid,
                                    prefix_tokens=self.prefix_tokens, **self.pool_options())
    self.attention = MultiHeadAttention(self.num_heads, causal=self.causal,
                                        dropout_rate=self.dropout_rate, use_bias=self.use_bias,
                                        implementation=self.implementation, dtype=self.dtype,
                                        rotary=self.rotary)

  def __call__(self, x: Array, mask: Array | None = None, *,
               segment_ids: Array | None = None, deterministic: bool = True) -> Array:
    """`segment_ids` [B, L] (packed rows): pooling and attention stay inside each segment."""
    if self.placement == 'mixer_input':
      x = self.context_pool(x, mask, segment_ids=segment_ids)
    return self.attention(x, mask, segment_ids=segment_ids, deterministic=deterministic)

  def block_output(self, x: Array, mask: Array | None = None, *,
                   segment_ids: Array | None = None) -> Array:
    """The block's output as the next block reads it (called by TransformerBlock): pooled by
    ContextPool with placement 'block_output' (packed rows: each segment as if alone), else x."""
    if self.placement != 'block_output':
      return x
    return self.context_pool(x, mask, segment_ids=segment_ids)

