"""Encoder-decoder Transformer for translation, with ContextPool (Huang et al. 2022, sec. 4.1).

Vaswani et al. (2017) in the pre-LN form, sizes of Li et al. (2019b, "Area attention") that the
ContextPool paper uses (configs/wmt14.py): Small 2 layers d 256 FFN 1024 4 heads; Base 6 layers
d 512 FFN 2048 8 heads; Big 6 layers d 1024 FFN 4096 16 heads.

- A shared SentencePiece vocabulary and a single embedding table for encoder input, decoder
  input and output projection (three-way tying, Press & Wolf 2017, as Vaswani et al.),
  initialised with std d^-1/2 and scaled by sqrt(d) on input.
- Positions (`positions`): fixed sinusoids at the given positions (the packer's per-sentence
  positions, the decoding step: defined at any length, no parameters); 'rotary' (the encoder
  mixer's and the decoder self-attention's q and k; the cross-attention has none); or 'none'.
- Encoder self-attention: any registered mixer (`mixer`, `mixer_kwargs`); 'contextpool' is
  CP-attention. Decoder: causal self-attention, cross-attention over the encoder output, MLP.
- ContextPool "after every attention layer" (paper sec. 4.1): in the encoder via the
  'contextpool' mixer, in the decoder by `decoder_context_pool` (ContextPool options, None =
  off), always causal (position t pools target tokens <= t; its n is t + 1), placed as
  DecoderBlock says.
- Packed rows: `{inputs,targets}_segment_ids` / `_positions`: attention, cross-attention and
  ContextPool stay inside each sentence; without them, a sentence per row, id 0 padding. The
  decoder input is the target shifted right, 0 as start token at every sentence start (Flax wmt).
- Decoding (`decode=True`): the decoder self-attention's keys and values are cached one token per
  call, the cross-attention's projected once per sentence; every decoder ContextPool caches its
  inputs, predictor states and pooling logits and pools the new token over them (O(L) per token).
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.attention import merge_heads, softmax_attention, split_heads
from poolformers_jax.layers.common import (
  NEG_INF,
  Array,
  Dtype,
  MlpBlock,
  apply_rotary,
  check_choice,
  check_choices,
  check_heads,
  sinusoidal_positions,
)
from poolformers_jax.layers.context_pool import (
  ContextPool,
  ContextPoolOptions,
  PoolSites,
  predicted_channels,
  predictor_width,
)
from poolformers_jax.layers.registry import MIXERS
from poolformers_jax.models.block import ACTIVATIONS, PreNormResidual, TransformerBlock
from poolformers_jax.models.registry import register_model_class

LAYER_NORM_EPSILON = 1e-6
# 0 = padding and the decoder's start token (shift_right); the end of sentence is `eos_id`, from
# the dataset's info (EOS_ID when a model is built without one).
PAD_ID, EOS_ID = 0, 1
PACKING_KEYS = ('inputs_segment_ids', 'inputs_positions', 'targets_segment_ids',
                'targets_positions')


def shift_right(targets: Array, segment_ids: Array | None = None) -> Array:
  """Decoder inputs: targets moved one step right, 0 (the start token) at each sentence start."""
  shifted = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  if segment_ids is not None:
    starts = segment_ids != jnp.pad(segment_ids, ((0, 0), (1, 0)))[:, :-1]
    shifted = jnp.where(starts, 0, shifted)
  return shifted


def _segments(tokens: Array, segment_ids: Array | None, positions: Array | None):
  """(segment ids, positions, mask): given (packed) or one sentence per row (0 = padding)."""
  if segment_ids is None:
    segment_ids = (tokens != 0).astype(jnp.int32)
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  return segment_ids, positions, segment_ids > 0


def _bias(allowed: Array) -> Array:
  """[B, Lq, Lk] bool -> additive [B, 1, Lq, Lk] attention bias."""
  return jnp.where(allowed[:, None], 0.0, NEG_INF).astype(jnp.float32)


class Attention(nn.Module):
  """Softmax multi-head attention of `x` over `memory` with an additive bias [B, 1, Lq, Lk]
  (parameters as MultiHeadAttention). With `decode=True` (one token per call), `cache` says what
  the 'cache' collection keeps:
  - 'steps' (decoder self-attention): the keys and values of every step so far;
  - 'memory' (cross-attention): the encoder output's keys and values, projected when the cache
    is created (seq2seq_decode.init_cache);
  - 'none': nothing (the slower reference the translation benchmark compares with).
  `rotary`: q and k turned by position, a decoding step's at its cache index.
  """
  num_heads: int
  dropout_rate: float = 0.0
  decode: bool = False
  cache: str = 'steps'
  dtype: Dtype | None = None
  rotary: bool = False

  @nn.compact
  def __call__(self, x: Array, memory: Array, bias: Array, *,
               deterministic: bool = True) -> Array:
    dim = x.shape[-1]
    check_heads(dim, self.num_heads, type(self).__name__)
    dense = lambda name: nn.Dense(dim, dtype=self.dtype, name=name)
    step = (self.get_variable('cache', 'index')[None] if self.has_variable('cache', 'index')
            else None)
    turn = (lambda t: apply_rotary(t, self.num_heads, step)) if self.rotary else (lambda t: t)
    q = split_heads(turn(dense('query')(x)), self.num_heads)
    if self.decode and self.cache == 'memory':
      if self.has_variable('cache', 'memory_key'):
        k: Array = self.get_variable('cache', 'memory_key')
        v: Array = self.get_variable('cache', 'memory_value')
      else:   # cache creation: project the encoder output once
        k = split_heads(dense('key')(memory), self.num_heads)
        v = split_heads(dense('value')(memory), self.num_heads)
        self.put_variable('cache', 'memory_key', k)
        self.put_variable('cache', 'memory_value', v)
    else:
      k = split_heads(turn(dense('key')(memory)), self.num_heads)
      v = split_heads(dense('value')(memory), self.num_heads)
    if self.decode and self.cache == 'steps':
      initialized = self.has_variable('cache', 'cached_key')
      cached_k = self.variable('cache', 'cached_key', jnp.zeros, k.shape, k.dtype)
      cached_v = self.variable('cache', 'cached_value', jnp.zeros, v.shape, v.dtype)
      index = self.variable('cache', 'index', lambda: jnp.array(0, jnp.int32))
      if initialized:   # one new token: write it at `index`, attend to positions <= index
        i = index.value
        cached_k.value = jax.lax.dynamic_update_slice(cached_k.value, k, (0, 0, i, 0))
        cached_v.value = jax.lax.dynamic_update_slice(cached_v.value, v, (0, 0, i, 0))
        k, v = cached_k.value, cached_v.value
        index.value = i + 1
        seen = jnp.arange(k.shape[2]) <= i
        bias = jnp.where(seen, 0.0, NEG_INF)[None, None, None, :].astype(jnp.float32)
    # Beam search keeps a single copy of a sentence's memory for its K beams (rows b*K ..
    # b*K+K-1 of q): their queries attend as K query positions of row b.
    beams = q.shape[0] // k.shape[0]
    if beams > 1:
      q, bias = _beams_to_positions(q, beams), _beams_to_positions(bias, beams)
    # Dropout on the attention probabilities (tensor2tensor's attention_dropout).
    _, weights = softmax_attention(q, k, v, bias)
    self.sow('intermediates', 'attention_weights', weights)
    dropped = nn.Dropout(self.dropout_rate)(weights, deterministic=deterministic)
    out = jnp.einsum('bhqk,bhkd->bhqd', dropped.astype(v.dtype), v)
    if beams > 1:
      out = _positions_to_beams(out, beams)
    return dense('out')(merge_heads(out))


def _beams_to_positions(t: Array, beams: int) -> Array:
  """[B*K, H, Lq, X] -> [B, H, K*Lq, X]: the K beams of a sentence as query positions."""
  rows, heads, length, width = t.shape
  t = t.reshape(rows // beams, beams, heads, length, width).transpose(0, 2, 1, 3, 4)
  return t.reshape(rows // beams, heads, beams * length, width)


def _positions_to_beams(t: Array, beams: int) -> Array:
  """The inverse of _beams_to_positions."""
  batch, heads, length, width = t.shape
  t = t.reshape(batch, heads, beams, length // beams, width).transpose(0, 2, 1, 3, 4)
  return t.reshape(batch * beams, heads, length // beams, width)


class _PredictorStep(nn.Module):
  """ContextPool's predictor m(X) one position at a time (the parameters of PoolingPredictor)."""
  kind: str
  hidden_dim: int
  num_outputs: int
  dtype: Dtype | None = None

  def setup(self):
    if self.kind == 'conv':   # VALID on the 3-token causal window = the causal conv at its end
      self.conv1 = nn.Conv(self.hidden_dim, (3,), padding='VALID', dtype=self.dtype)
      self.conv2 = nn.Conv(self.num_outputs, (3,), padding='VALID', dtype=self.dtype)
    else:
      self.fc1 = nn.Dense(self.hidden_dim, dtype=self.dtype)
      self.fc2 = nn.Dense(self.num_outputs, dtype=self.dtype)

  def hidden(self, window: Array) -> Array:     # [B, 3, C] -> [B, H]
    return nn.gelu(self.conv1(window)[:, 0])

  def out(self, window: Array) -> Array:        # [B, 3, H] -> [B, outputs]
    return self.conv2(window)[:, 0]

  def mlp(self, x: Array) -> Array:             # [B, C] -> [B, outputs]
    return self.fc2(nn.gelu(self.fc1(x)))


class ContextPoolStep(ContextPoolOptions):
  """Causal ContextPool for decoding: one new token per call, the parameters and output of
  ContextPool(causal=True) at that position. Cached: the inputs so far (two leading zero slots:
  the causal conv's padding), the predictor's hidden states and the pooling-weight logits.
  Not supported: predictor 'attention', locality 'random_sparse'. Called as ContextPool is; the
  mask and segments are the cache's (one sentence per row, every cached token real)."""
  dtype: Dtype | None = None

  @nn.compact
  def __call__(self, x: Array, mask: Array | None = None, *,
               segment_ids: Array | None = None) -> Array:
    del mask, segment_ids
    name = type(self).__name__
    self.check_pool_options()
    if self.predictor == 'attention' or self.locality == 'random_sparse':
      raise ValueError(f"{name}: cached decoding supports predictor 'conv'/'mlp' and every "
                       "locality but 'random_sparse'; decode without a cache for the others.")
    initialized = self.has_variable('cache', 'inputs')
    batch, length, dim = x.shape        # at cache creation: the full decode length
    hidden = predictor_width(dim, self.predictor_dim)
    xs = self.variable('cache', 'inputs', jnp.zeros, (batch, length + 2, dim), x.dtype)
    hs = self.variable('cache', 'hidden', jnp.zeros, (batch, length + 2, hidden), x.dtype)
    ws = self.variable('cache', 'w_logits', jnp.zeros, (batch, length), jnp.float32)
    index = self.variable('cache', 'index', lambda: jnp.array(0, jnp.int32))
    length = ws.value.shape[1]          # the decode length (x holds one token after creation)
    x_t = x[:, 0]
    t = index.value
    need_w, need_s = predicted_channels(self.weights, self.locality)
    w_logits, s_logit = None, None
    inputs = jax.lax.dynamic_update_slice(xs.value, x_t[:, None], (0, t + 2, 0))
    if need_w or need_s:
      step = _PredictorStep(self.predictor, hidden, need_w + need_s, dtype=self.dtype,
                            name='predictor')
      if self.predictor == 'conv':
        h_t = step.hidden(jax.lax.dynamic_slice_in_dim(inputs, t, 3, axis=1))
        hiddens = jax.lax.dynamic_update_slice(hs.value, h_t[:, None].astype(hs.value.dtype),
                                               (0, t + 2, 0))
        raw = step.out(jax.lax.dynamic_slice_in_dim(hiddens, t, 3, axis=1))
        if initialized:
          hs.value = hiddens
      else:
        raw = step.mlp(x_t)
      raw = raw.astype(jnp.float32)
      if need_w:
        w_logits = jax.lax.dynamic_update_slice(ws.value, raw[:, :1], (0, t))
        if initialized:
          ws.value = w_logits
      s_logit = raw[:, -1:] if need_s else None
    if initialized:
      xs.value = inputs
      index.value = t + 1
    seen = jnp.broadcast_to(jnp.arange(length) <= t, (batch, length))
    n = jnp.full((batch, 1), t + 1, jnp.float32)
    key_pos = jnp.arange(length, dtype=jnp.float32)[:, None]
    query_pos = jnp.full((1, 1), t, jnp.float32)
    y = self.pool(inputs[:, 2:], seen, PoolSites(query_pos, key_pos, n, causal=True),
                  query_x=x[:, :1], allowed=seen[:, None], w_logit=w_logits, s_logit=s_logit)
    # Cache creation sees the whole decode length: keep that shape for the layers after.
    return y if initialized else jnp.broadcast_to(y, x.shape)


class DecoderSelfAttention(nn.Module):
  """Causal self-attention, with causal ContextPool first when `context_pool` options are given
  (parameters 'context_pool' and 'attention', as ContextPoolAttention)."""
  num_heads: int
  context_pool: Mapping[str, Any] | None = None
  dropout_rate: float = 0.0
  decode: bool = False
  dtype: Dtype | None = None
  rotary: bool = False

  @nn.compact
  def __call__(self, x: Array, segment_ids: Array, mask: Array, *,
               deterministic: bool = True) -> Array:
    if self.context_pool is not None:
      pool = causal_context_pool(dict(self.context_pool), self.decode, self.dtype, 'context_pool')
      x = pool(x, mask, segment_ids=segment_ids)
    length = x.shape[1]
    allowed = (segment_ids[:, :, None] == segment_ids[:, None, :]) & mask[:, None, :]
    allowed = allowed & jnp.tril(jnp.ones((length, length), bool))[None]
    return Attention(self.num_heads, self.dropout_rate, self.decode, dtype=self.dtype,
                     rotary=self.rotary, name='attention')(x, x, _bias(allowed),
                                                           deterministic=deterministic)


def causal_context_pool(options: dict, decode: bool, dtype: Dtype | None, name: str
                        ) -> nn.Module:
  """A decoder's causal ContextPool with `options`: its cached step when decoding."""
  if decode:
    return ContextPoolStep(dtype=dtype, name=name, **options)
  return ContextPool(causal=True, dtype=dtype, name=name, **options)


DECODER_PLACEMENTS = ('every_attention', 'self_attention', 'block_output')


class PooledQueries(nn.Module):
  """`attention(pool(x), memory, bias)`: cross-attention whose queries are first pooled by a
  causal ContextPool; both modules built (and named) by the caller, as PreNormResidual's."""
  pool: nn.Module
  attention: nn.Module

  def __call__(self, x: Array, memory: Array, bias: Array, *, mask: Array, segment_ids: Array,
               deterministic: bool = True) -> Array:
    x = self.pool(x, mask, segment_ids=segment_ids)
    return self.attention(x, memory, bias, deterministic=deterministic)


class DecoderBlock(nn.Module):
  """Pre-LN: causal self-attention, then cross-attention over the encoder output, then the MLP;
  each a PreNormResidual. `context_pool` (ContextPool options, None = off) places a causal
  ContextPool by its 'placement' (DECODER_PLACEMENTS):
  - 'every_attention' (default): before self-attention (parameters 'self_attention/
    context_pool') and before cross-attention ('cross_context_pool': the queries are pooled
    decoder tokens; keys/values are the encoder output): "after every attention layer".
  - 'self_attention': only before self-attention (the narrower reading).
  - 'block_output': plain attention inside; the block's output is pooled ('output_context_pool'),
    as the encoder's 'block_output' placement (Fig. 2c).
  """
  num_heads: int
  mlp_dim: int
  context_pool: Mapping[str, Any] | None = None
  dropout_rate: float = 0.0
  attention_dropout_rate: float = 0.0
  drop_path_rate: float = 0.0
  activation: str = 'relu'
  decode: bool = False
  cache_cross_attention: bool = True
  dtype: Dtype | None = None
  rotary: bool = False    # the self-attention's

  @nn.compact
  def __call__(self, y: Array, memory: Array, segment_ids: Array, mask: Array, cross_bias: Array,
               *, deterministic: bool = True) -> Array:
    options = {} if self.context_pool is None else dict(self.context_pool)
    placement = None if self.context_pool is None else options.pop('placement', 'every_attention')
    if placement is not None and placement not in DECODER_PLACEMENTS:
      raise ValueError(f'decoder_context_pool.placement={placement!r}; choose one of '
                       f'{list(DECODER_PLACEMENTS)}.')
    norm = lambda name: nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=self.dtype, name=name)
    residual = lambda name, fn, rate: PreNormResidual(norm(name), fn, rate, self.drop_path_rate)
    self_attention = DecoderSelfAttention(
        self.num_heads, options if placement in ('every_attention', 'self_attention') else None,
        self.attention_dropout_rate, self.decode, self.dtype, self.rotary, name='self_attention')
    y = residual('norm1', self_attention, self.dropout_rate)(y, segment_ids, mask,
                                                            deterministic=deterministic)
    cross = Attention(self.num_heads, self.attention_dropout_rate, self.decode,
                      'memory' if self.cache_cross_attention else 'none', dtype=self.dtype,
                      name='cross_attention')
    if placement == 'every_attention':
      pool = causal_context_pool(options, self.decode, self.dtype, 'cross_context_pool')
      pooled = PooledQueries(pool, cross)
      y = residual('norm_cross', pooled, self.dropout_rate)(
          y, memory, cross_bias, mask=mask, segment_ids=segment_ids, deterministic=deterministic)
    else:
      y = residual('norm_cross', cross, self.dropout_rate)(y, memory, cross_bias,
                                                           deterministic=deterministic)
    mlp = MlpBlock(self.mlp_dim, activation=ACTIVATIONS[self.activation],
                   dropout_rate=self.dropout_rate, dtype=self.dtype, name='mlp')
    y = residual('norm2', mlp, 0.0)(y, deterministic=deterministic)
    if placement == 'block_output':
      pool = causal_context_pool(options, self.decode, self.dtype, 'output_context_pool')
      y = pool(y, mask, segment_ids=segment_ids)
    return y


class TransformerSeq2Seq(nn.Module):
  """{'inputs': [B, Ls], 'targets': [B, Lt] (+ packing arrays)} -> logits [B, Lt, vocab]."""
  vocab_size: int
  num_layers: int = 6
  num_decoder_layers: int | None = None   # None: num_layers
  emb_dim: int = 512
  num_heads: int = 8
  mlp_dim: int = 2048
  mixer: str = 'softmax'                     # the encoder's self-attention
  mixer_kwargs: Mapping[str, Any] | None = None
  decoder_context_pool: Mapping[str, Any] | None = None   # ContextPool options; None = off
  dropout_rate: float = 0.1                  # residual dropout (Vaswani et al. P_drop)
  attention_dropout_rate: float = 0.0        # on the decoder's attention probabilities
  drop_path_rate: float = 0.0
  activation: str = 'relu'
  eos_id: int = EOS_ID                       # end of sentence (DatasetInfo.model_defaults)
  decode: bool = False
  # Decoding: cross-attention keys/values projected once per sentence (False: at every step).
  cache_cross_attention: bool = True
  dtype: Dtype | None = None
  positions: Literal['sinusoidal', 'rotary', 'none'] = 'sinusoidal'   # see the module docstring

  def setup(self):
    check_choice('TransformerSeq2Seq', 'activation', self.activation, sorted(ACTIVATIONS))
    check_choices(self)
    self.embed = nn.Embed(self.vocab_size, self.emb_dim, dtype=self.dtype or jnp.float32,
                          embedding_init=nn.initializers.normal(self.emb_dim ** -0.5))
    common: dict[str, Any] = dict(
        dropout_rate=self.dropout_rate, attention_dropout_rate=self.attention_dropout_rate,
        drop_path_rate=self.drop_path_rate, activation=self.activation, dtype=self.dtype,
        rotary=self.positions == 'rotary')
    self.encoder_blocks = [
        TransformerBlock(self.mixer, self.num_heads, self.mlp_dim, self.mixer_kwargs,
                         layer_norm_epsilon=LAYER_NORM_EPSILON, **common)
        for _ in range(self.num_layers)]
    self.decoder_blocks = [
        DecoderBlock(self.num_heads, self.mlp_dim, self.decoder_context_pool, decode=self.decode,
                     cache_cross_attention=self.cache_cross_attention, **common)
        for _ in range(self.num_decoder_layers or self.num_layers)]
    self.encoder_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=self.dtype)
    self.decoder_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=self.dtype)
    self.dropout = nn.Dropout(self.dropout_rate)

  def _embed(self, tokens: Array, positions: Array, deterministic: bool) -> Array:
    dtype = self.dtype or jnp.float32
    x = self.embed(tokens) * jnp.asarray(self.emb_dim ** 0.5, dtype)
    if self.positions == 'sinusoidal':
      x = x + sinusoidal_positions(positions, self.emb_dim).astype(dtype)
    return self.dropout(x, deterministic=deterministic)

  def encode(self, inputs: Array, inputs_segment_ids: Array | None = None,
             inputs_positions: Array | None = None, *, deterministic: bool = True) -> Array:
    """Source ids [B, Ls] -> encoder output [B, Ls, D]."""
    _check_tokens(inputs, 'inputs')
    _, positions, mask = _segments(inputs, inputs_segment_ids, inputs_positions)
    packed = {}
    if inputs_segment_ids is not None:
      if 'segment_ids' not in inspect.signature(MIXERS[self.mixer].__call__).parameters:
        raise ValueError(f'mixer {self.mixer!r} cannot keep packed sentences apart (it takes no '
                         'segment_ids); set config.data.pack=False.')
      packed['segment_ids'] = inputs_segment_ids
    x = self._embed(inputs, positions, deterministic)
    for block in self.encoder_blocks:
      x = block(x, mask, deterministic=deterministic, **packed)
    return self.encoder_norm(x)

  def decode_logits(self, memory: Array, inputs: Array, decoder_inputs: Array,
                    targets_segment_ids: Array | None, targets_positions: Array | None,
                    inputs_segment_ids: Array | None = None, *,
                    target_mask: Array | None = None, deterministic: bool = True) -> Array:
    """Teacher forcing (or one decoding step with decode=True) -> logits [B, Lt, vocab]."""
    src_segments, _, src_mask = _segments(inputs, inputs_segment_ids, None)
    if target_mask is None:
      if targets_segment_ids is None:
        raise ValueError('TransformerSeq2Seq.decode_logits: pass target_mask or '
                         'targets_segment_ids (real target positions).')
      target_mask = targets_segment_ids > 0
    segments = targets_segment_ids if targets_segment_ids is not None else (
        target_mask.astype(jnp.int32))
    if targets_positions is None:
      targets_positions = jnp.broadcast_to(jnp.arange(decoder_inputs.shape[1]),
                                           decoder_inputs.shape)
    cross = (segments[:, :, None] == src_segments[:, None, :]) & src_mask[:, None, :]
    if self.decode:   # one token per row against the whole source
      cross = jnp.broadcast_to(src_mask[:, None, :], cross.shape)
    y = self._embed(decoder_inputs, targets_positions, deterministic)
    for block in self.decoder_blocks:
      y = block(y, memory, segments, target_mask, _bias(cross), deterministic=deterministic)
    y = self.decoder_norm(y)
    return self.embed.attend(y).astype(jnp.float32)

  def __call__(self, batch: Mapping[str, Array], *, deterministic: bool = True) -> Array:
    if not isinstance(batch, Mapping) or 'inputs' not in batch or 'targets' not in batch:
      raise ValueError("TransformerSeq2Seq: expected a dict with 'inputs' and 'targets' "
                       f'(and optional {PACKING_KEYS}), got {type(batch).__name__}.')
    get = lambda k: batch.get(k, None)
    targets = batch['targets']
    _check_tokens(targets, 'targets')
    memory = self.encode(batch['inputs'], get('inputs_segment_ids'), get('inputs_positions'),
                         deterministic=deterministic)
    segment_ids = get('targets_segment_ids')
    target_mask = segment_ids > 0 if segment_ids is not None else targets != 0
    decoder_inputs = shift_right(targets, segment_ids)
    return self.decode_logits(memory, batch['inputs'], decoder_inputs, segment_ids,
                              get('targets_positions'), get('inputs_segment_ids'),
                              target_mask=target_mask, deterministic=deterministic)

  def decode_step(self, memory: Array, inputs: Array, token: Array, position: Array) -> Array:
    """decode=True: the previous token [B, 1] at `position` -> logits [B, vocab] of the next."""
    mask = jnp.ones(token.shape, bool)
    positions = jnp.broadcast_to(position, token.shape)
    return self.decode_logits(memory, inputs, token, None, positions, target_mask=mask)[:, -1]


def _check_tokens(tokens: Array, what: str) -> None:
  if tokens.ndim != 2 or not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise ValueError(f'TransformerSeq2Seq: {what} must be int token ids [batch, length], got '
                     f'{tokens.dtype} shape {tuple(tokens.shape)}.')


register_model_class('transformer_seq2seq', TransformerSeq2Seq, required=('vocab_size',))
