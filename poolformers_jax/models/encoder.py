"""Pre-LN sequence encoder and classifier heads for Long Range Arena (LRA).

The LRA setting of PoNet and AdaMRA (Nystromformer's PyTorch LRA code, docs/papers/lra.md):
token embedding + learned position embedding, pre-LN blocks (any registered mixer), a final
LayerNorm, mean pooling and the head Linear(dim, 128)-ReLU-Linear(128, C). For retrieval one
encoder reads both documents and the head sees [x0, x1, x0 * x1, x0 - x1].

Pooling (`POOLINGS`): 'mean' (default) is the masked mean over real tokens; 'mean_padded' the
reference's mean of LN(x) * mask over the *padded* length (divided by `pool_length` when length
buckets cut batches shorter); 'cls' a prepended learned vector (not a vocabulary token, always
unmasked); 'last' the last real token, as a causal self-pretrained encoder fine-tunes (Amos et
al. 2024). Positions: 'learned' (default), 'sinusoidal' (token embeddings of unit scale, std
dim^-1/2 times sqrt(dim) as Vaswani et al. Sec. 3.4: the std-0.02 embeddings would leave a token's
identity ~2 % of its input beside the table), 'rotary' (mixers with a `rotary` field), 'none'.
dtype 'bfloat16' casts the embeddings (parameters stay float32, the logits are float32). The
MLP's `activation` and `layer_norm_epsilon` default to flax's tanh GELU and 1e-6; the reference's
erf GELU ('gelu_exact') and 1e-5 are the `reference` protocol's.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from poolformers_jax.layers.common import (
  LearnedPositionEmbedding,
  Positions,
  check_choice,
  check_choices,
  masked_mean,
  sinusoidal_positions,
)
from poolformers_jax.models.block import Remat, TransformerBlock, apply_block, fields_of
from poolformers_jax.models.registry import register_model_class

Array = jax.Array


def mean_padded_pool(x: Array, mask: Array, length: int | None = None) -> Array:
  """The Nystromformer / PoNet LRA code: sum over real tokens / padded length L. `length`: L
  when `x` is cut shorter than the data's padding (length-bucketed batches); None = x's own."""
  masked = x * mask[..., None].astype(x.dtype)
  if length is None:
    return jnp.mean(masked, axis=1)
  return jnp.sum(masked, axis=1) / length


def last_token_pool(x: Array, mask: Array, length: int | None = None) -> Array:
  """The last real token's features (right-padded rows; position 0 for an empty row)."""
  del length
  last = jnp.maximum(jnp.sum(mask, axis=1) - 1, 0)
  return jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]


# (features [B, L, D], mask [B, L], padded length or None) -> [B, D]; 'none': every position's
# features [B, L, D] (the masked-token model predicts each position).
POOLINGS: dict[str, Callable[..., Array]] = {
    'mean': lambda x, mask, length=None: masked_mean(x, mask, axis=1),
    'mean_padded': mean_padded_pool,
    'cls': lambda x, mask, length=None: x[:, 0],
    'last': last_token_pool,
    'none': lambda x, mask, length=None: x,
}


class SequenceEncoder(nn.Module):
  """Token ids [B, L] (0 = padding) -> pooled features [B, dim] in float32 ([B, L, dim] with
  pooling='none')."""
  vocab_size: int
  max_length: int
  dim: int = 64
  num_layers: int = 2
  num_heads: int = 2
  mlp_dim: int = 128
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  mixer: str = 'softmax'
  mixer_kwargs: dict[str, Any] | None = None
  pooling: str = 'mean'
  activation: str = 'gelu'             # the MLP's: block.ACTIVATIONS ('gelu_exact': erf form)
  layer_norm_epsilon: float = 1e-6
  dtype: Any = jnp.float32
  pool_length: int | None = None   # 'mean_padded' divides by it; None = the input's length
  causal: bool = False                # every mixer causal (`lra_causal_lm`)
  positions: Positions = 'learned'
  remat: Remat = 'none'   # what each block keeps for the backward pass (block.REMAT_POLICIES)

  @nn.compact
  def __call__(self, tokens: Array, *, deterministic: bool = True) -> Array:
    check_choices(self, 'SequenceEncoder')
    if tokens.ndim != 2:
      raise ValueError(f'SequenceEncoder: expected token ids [batch, length], got shape '
                       f'{tuple(tokens.shape)}.')
    check_choice('SequenceEncoder', 'pooling', self.pooling, sorted(POOLINGS))
    mask = tokens != 0
    unit_scale = self.positions == 'sinusoidal'
    x = nn.Embed(self.vocab_size, self.dim, name='token_embedding',
                 embedding_init=nn.initializers.normal(self.dim ** -0.5 if unit_scale else 0.02)
                 )(tokens)
    if unit_scale:
      x = x * jnp.asarray(self.dim ** 0.5, x.dtype)
    if self.pooling == 'cls':
      cls = self.param('cls', nn.initializers.zeros, (1, 1, self.dim))
      x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, self.dim)), x], axis=1)
      mask = jnp.concatenate([jnp.ones((x.shape[0], 1), bool), mask], axis=1)
    if self.positions == 'learned':
      x = LearnedPositionEmbedding(self.max_length + (self.pooling == 'cls'),
                                   name='position_embedding')(x)
    elif self.positions == 'sinusoidal':
      x = x + sinusoidal_positions(jnp.arange(x.shape[1]), self.dim).astype(x.dtype)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic).astype(
        self.dtype or jnp.float32)
    for i in range(self.num_layers):
      block = TransformerBlock(self.mixer, self.num_heads, self.mlp_dim, self.mixer_kwargs,
                               causal=self.causal, dropout_rate=self.dropout_rate,
                               attention_dropout_rate=self.attention_dropout_rate,
                               activation=self.activation, rotary=self.positions == 'rotary',
                               layer_norm_epsilon=self.layer_norm_epsilon, dtype=self.dtype,
                               name=f'block_{i}')
      x = apply_block(block, x, mask, deterministic, self.remat)
    x = nn.LayerNorm(epsilon=self.layer_norm_epsilon, dtype=jnp.float32, name='final_norm')(x)
    pooled = POOLINGS[self.pooling](x, mask, self.pool_length)
    self.sow('intermediates', 'pooled', pooled)
    return pooled


class ClassifierHead(nn.Module):
  """Linear(., hidden)-ReLU-Linear(hidden, C), float32."""
  num_classes: int
  hidden_dim: int = 128

  @nn.compact
  def __call__(self, x: Array) -> Array:
    x = nn.relu(nn.Dense(self.hidden_dim, dtype=jnp.float32, name='hidden')(x))
    return nn.Dense(self.num_classes, dtype=jnp.float32, name='logits')(x)


class LraEncoder(SequenceEncoder, kw_only=True):
  """Classification: tokens [B, L] -> logits [B, C]. The SequenceEncoder's fields (its parameters
  under 'encoder') and the head's; `features` is what the head sees."""
  num_classes: int
  head_hidden_dim: int = 128

  def features(self, encoder: SequenceEncoder, inputs: Array, deterministic: bool) -> Array:
    return encoder(inputs, deterministic=deterministic)

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    encoder = SequenceEncoder(**fields_of(self, SequenceEncoder), name='encoder')
    features = self.features(encoder, inputs, deterministic)
    return ClassifierHead(self.num_classes, self.head_hidden_dim, name='head')(features)


class LraDualEncoder(LraEncoder):
  """Retrieval: token pairs [B, 2, L] -> logits [B, C]; one shared encoder for both documents,
  the head sees [x0, x1, x0 * x1, x0 - x1]."""

  def features(self, encoder: SequenceEncoder, inputs: Array, deterministic: bool) -> Array:
    if inputs.ndim != 3 or inputs.shape[1] != 2:
      raise ValueError(f'LraDualEncoder: expected token pairs [batch, 2, length], got shape '
                       f'{tuple(inputs.shape)}.')
    b, _, length = inputs.shape
    pooled = encoder(inputs.reshape(2 * b, length), deterministic=deterministic)
    x0, x1 = pooled.reshape(b, 2, -1)[:, 0], pooled.reshape(b, 2, -1)[:, 1]
    return jnp.concatenate([x0, x1, x0 * x1, x0 - x1], axis=-1)


class LraMaskedLM(SequenceEncoder, kw_only=True):
  """Self-pretraining (masked tokens): token ids [..., L] with [MASK] ids -> logits
  [..., L, num_classes], every position's features through a Dense ('mlm_head'). The encoder is
  the classifier's, name for name, so fine-tuning reads it with `init_from` and a fresh 'head'.
  A retrieval pair [B, 2, L] is two documents, each encoded on its own."""
  num_classes: int
  head_hidden_dim: int = 128   # the classifier's; unused here (one config for both stages)
  head_name = 'mlm_head'

  @nn.compact
  def __call__(self, inputs: Array, *, deterministic: bool = True) -> Array:
    encoder = SequenceEncoder(**{**fields_of(self, SequenceEncoder), 'pooling': 'none'},
                              name='encoder')
    tokens = inputs.reshape(-1, inputs.shape[-1])
    features = encoder(tokens, deterministic=deterministic)
    logits = nn.Dense(self.num_classes, dtype=jnp.float32, name=self.head_name)(features)
    return logits.reshape(*inputs.shape, self.num_classes)


class LraCausalLM(LraMaskedLM, kw_only=True):
  """Next-token self-pretraining: token ids [..., L] -> logits [..., L, num_classes], position t
  predicting token t + 1 (every mixer causal). The encoder's parameters are the classifier's,
  shape for shape (no [MASK] row); the per-position Dense is 'lm_head'."""
  head_name = 'lm_head'


register_model_class('lra_encoder', LraEncoder)
register_model_class('lra_dual_encoder', LraDualEncoder)
register_model_class('lra_masked_lm', LraMaskedLM)
register_model_class('lra_causal_lm', LraCausalLM, causal=True)   # whatever the config says
