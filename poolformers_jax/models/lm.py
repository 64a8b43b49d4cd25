"""Strictly causal character-level language model (enwik8 / text8), ContextPool paper Table 5.

Architecture (Huang et al. 2022, Sec. 4.1: "the same 12-layer model architecture as Longformer
(Beltagy et al. 2020)"): 12 layers, width 512, 8 heads of 64, feed-forward 2048, pre-LN blocks, a
final LayerNorm and a projection onto the byte vocabulary. CP-Transformer (L) swaps the softmax
mixer of every layer for 'contextpool'; the MSAC LM for 'msac'; any registered causal mixer works.

Decided here (docs/papers/context_pool.md): fixed sinusoidal positions (no parameters, defined at
the 32k-context evaluation's length; Table 5's counts point there too: CP-Transformer (12) has
39M, fewer than Longformer's 41M by about its relative-position projections, 12 x 512 x 512 =
3.1M); the output layer tied to the input embedding (initialised with std d^-1/2 and scaled by
sqrt(d) on input, so tokens and sinusoids have one scale); ReLU feed-forward; dropout 0.2
everywhere the paper says "dropout rates 0.2". logits[:, t] predict token t + 1; token id 0 is
padding.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from poolformers_jax.layers.common import (
  Array,
  Dtype,
  LearnedPositionEmbedding,
  Positions,
  check_choice,
  check_choices,
  sinusoidal_positions,
)
from poolformers_jax.models.block import ACTIVATIONS, Remat, TransformerBlock, apply_block
from poolformers_jax.models.registry import register_model_class


def lm_inputs_targets(tokens: Array) -> tuple[Array, Array]:
  """Raw windows of L + 1 characters -> inputs x[:, :-1] and targets x[:, 1:] (the pipeline's
  convention)."""
  return tokens[:, :-1], tokens[:, 1:]


class CharTransformerLM(nn.Module):
  """Decoder-only character LM: int32 tokens [B, L] -> float32 logits [B, L, vocab_size]."""
  vocab_size: int
  num_layers: int = 12
  emb_dim: int = 512
  num_heads: int = 8
  mlp_dim: int = 2048
  mixer: str = 'softmax'
  mixer_kwargs: Mapping[str, Any] | None = None
  dropout_rate: float = 0.2
  attention_dropout_rate: float = 0.2
  activation: str = 'relu'
  positions: Positions = 'sinusoidal'
  max_length: int | None = None  # table size of positions='learned'
  tie_embeddings: bool = True
  dtype: Dtype | None = None
  remat: Remat = 'none'   # what each block keeps for the backward pass (block.REMAT_POLICIES)

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    name = type(self).__name__
    if inputs.ndim != 2 or not jnp.issubdtype(inputs.dtype, jnp.integer):
      raise ValueError(f'{name}: expected int tokens of shape [batch, length], got '
                       f'{inputs.dtype} shape {tuple(inputs.shape)}.')
    check_choices(self)
    check_choice(name, 'activation', self.activation, sorted(ACTIVATIONS))
    dtype = self.dtype if self.dtype is not None else jnp.float32
    mask = inputs != 0
    embed = nn.Embed(self.vocab_size, self.emb_dim, dtype=dtype, name='embed',
                     embedding_init=nn.initializers.normal(self.emb_dim ** -0.5))
    x = embed(inputs) * jnp.asarray(self.emb_dim ** 0.5, dtype)
    if self.positions == 'sinusoidal':
      x = x + sinusoidal_positions(jnp.arange(inputs.shape[1]),
                                   self.emb_dim)[None].astype(dtype)
    elif self.positions == 'learned':
      if self.max_length is None:
        raise ValueError(f"{name}: positions='learned' needs max_length (the longest "
                         f'sequence, e.g. 8192); set config.model.max_length.')
      x = LearnedPositionEmbedding(self.max_length, name='pos_embed')(x)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    for i in range(self.num_layers):
      block = TransformerBlock(self.mixer, self.num_heads, self.mlp_dim, self.mixer_kwargs,
                               causal=True, dropout_rate=self.dropout_rate,
                               attention_dropout_rate=self.attention_dropout_rate,
                               activation=self.activation, rotary=self.positions == 'rotary',
                               dtype=self.dtype, name=f'block_{i}')
      x = apply_block(block, x, mask, deterministic, self.remat)
    return self.head(embed, x)

  @nn.nowrap
  def head(self, embed: nn.Embed, x: Array) -> Array:
    """The final LayerNorm, then the output layer (tied: the embedding's transpose) -> float32
    logits; inside __call__ (and the decoder's, models/lm_decode.py)."""
    x = nn.LayerNorm(dtype=self.dtype, name='ln_final')(x)
    if self.tie_embeddings:
      logits = embed.attend(x)
    else:
      dtype = self.dtype if self.dtype is not None else jnp.float32
      logits = nn.Dense(self.vocab_size, dtype=dtype, name='logits')(x)
    return logits.astype(jnp.float32)


register_model_class('char_lm', CharTransformerLM)
