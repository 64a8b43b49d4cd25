"""PoNet pre-training model: a BERT-style PoNet encoder with MLM and SSO heads (Tan et al., 2022).

Follows the authors' BERT version (lxchtan/PoNet, models/modeling_ponet.py), HuggingFace BERT with
self-attention replaced by the PoNet mixer (docs/papers/ponet.md): token + learned position +
token type embeddings, LayerNorm, dropout; post-LN blocks (LayerNorm eps 1e-12, exact GELU); SMP
segments are sentences, [CLS] and [SEP] each a segment of their own and kept out of the SMP / LMP
terms ("clsgsepg"); the MLM head Dense -> GELU -> LayerNorm -> logits tied to the token embedding
plus a bias; the SSO head (StructBERT, 3 classes) on BERT's pooler tanh(Dense(h[CLS])); every
Dense kernel and embedding normal(0.02), the mixer's projections included (`_init_weights`).
`ponet_classifier` is PoNetForSequenceClassification (one output: regression, STS-B);
`mixer='softmax'` is BERT itself, the paper's baseline, with the same names. Decided here: token
types, when not given, count the [SEP] before each token (capped at type_vocab_size - 1).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import flax.linen as nn
import jax.numpy as jnp
from flax.core import FrozenDict

from poolformers_jax.layers.common import (
  Array,
  Dtype,
  Positions,
  check_choices,
  sinusoidal_positions,
)
from poolformers_jax.layers.registry import MIXERS, check_rotary, mixer_fields, traits_of
from poolformers_jax.models.block import TransformerBlock, model_kwargs
from poolformers_jax.models.registry import register_model

SSO_CLASSES = 3  # StructBERT: 0 = B follows A, 1 = B precedes A, 2 = B from another document
_init = nn.initializers.normal(0.02)


def sentence_segment_ids(inputs: Array, cls_id: int, sep_id: int) -> Array:
  """SMP segments of BERT input: sentences, with [CLS] and [SEP] each a segment of their own.

  "[CLS] a b [SEP] c [SEP]" -> 0 1 1 2 3 4 (official get_segment_index).
  """
  boundary = ((inputs == cls_id) | (inputs == sep_id)).astype(jnp.int32)
  after_boundary = jnp.pad(boundary[:, :-1], ((0, 0), (1, 0)))
  return jnp.cumsum(boundary + after_boundary, axis=1) - 1


def token_type_ids_from_inputs(inputs: Array, sep_id: int, type_vocab_size: int) -> Array:
  """Sentence A/B ids: the number of [SEP] strictly before each token, capped."""
  seps_before = jnp.cumsum(inputs == sep_id, axis=1) - (inputs == sep_id)
  return jnp.minimum(seps_before, type_vocab_size - 1).astype(jnp.int32)


class BertEncoderFields(nn.Module):
  """The BERT-style encoder both PoNet models share: embeddings and post-LN layers. `inputs`:
  int [B, L] token ids (SMP segments derived from [CLS]/[SEP]: GLUE) or [B, 2, L] (token ids,
  then SMP segment ids from the data, as the official pre-training code passes them)."""
  vocab_size: int
  emb_dim: int = 768
  num_layers: int = 12
  num_heads: int = 12
  mlp_dim: int = 3072
  max_length: int = 512
  type_vocab_size: int = 2
  dropout_rate: float = 0.1
  cls_id: int = 101
  sep_id: int = 102
  layer_norm_eps: float = 1e-12
  mixer: Literal['ponet', 'softmax'] = 'ponet'   # PoNet, or softmax attention (BERT)
  # BERT's learned table ('position_embed'), sinusoids, rotary (softmax only) or none.
  positions: Positions = 'learned'
  mixer_kwargs: Mapping[str, Any] = FrozenDict()
  dtype: Dtype | None = None
  # The inputs bring sentences: the mixer gets the sentence inputs and options its traits name
  # (PoNet's segment_ids, boundary_mask and segment_num; encode below).
  sentence_inputs = True

  @nn.nowrap
  def check_mixer(self) -> None:
    """Refuses a mixer or options that are not this model's (when the model is built)."""
    name = type(self).__name__
    check_choices(self)
    if self.positions == 'rotary':
      check_rotary(self.mixer)
    # The model sets these itself (heads, sentence segments from the inputs, dtype, dropout).
    allowed = mixer_fields(MIXERS[self.mixer]) - {'num_heads', 'dtype', 'dropout_rate',
                                                  'kernel_init', 'rotary'} - set(
        traits_of(MIXERS[self.mixer]).sentence_options)
    bad = sorted(set(self.mixer_kwargs) - allowed)
    if bad:
      raise ValueError(f'{name}: mixer_kwargs {bad} are not {self.mixer} options this model '
                       f'takes; valid: {sorted(allowed)}.')

  def encode(self, inputs: Array, segment_ids: Array | None, token_type_ids: Array | None,
             deterministic: bool) -> tuple[Array, nn.Embed]:
    """Hidden states [B, L, D] and the token embedding (for the tied MLM decoder), inside a
    subclass's compact __call__ (parameter names top-level)."""
    name = type(self).__name__
    self.check_mixer()
    if inputs.ndim == 3 and inputs.shape[1] == 2:
      inputs, segment_ids = inputs[:, 0], inputs[:, 1] if segment_ids is None else segment_ids
    if inputs.ndim != 2:
      raise ValueError(f'{name}: expected int token ids [batch, length] or [batch, 2, length] '
                       f'(ids, sentence segment ids), got shape {tuple(inputs.shape)}.')
    length = inputs.shape[1]
    if length > self.max_length:
      raise ValueError(f'{name}: sequence length {length} exceeds max_length {self.max_length}; '
                       f'raise model.max_length (init_from tiles the position embeddings) or '
                       f'truncate the inputs.')
    mask = inputs != 0
    boundary = (inputs == self.cls_id) | (inputs == self.sep_id)
    if segment_ids is None:
      segment_ids = sentence_segment_ids(inputs, self.cls_id, self.sep_id)
    if token_type_ids is None:
      token_type_ids = token_type_ids_from_inputs(inputs, self.sep_id, self.type_vocab_size)

    embed = nn.Embed(self.vocab_size, self.emb_dim, embedding_init=_init, dtype=self.dtype,
                     name='token_embed')
    h = embed(inputs)
    if self.positions == 'learned':
      h = h + nn.Embed(self.max_length, self.emb_dim, embedding_init=_init, dtype=self.dtype,
                       name='position_embed')(jnp.arange(length)[None])
    elif self.positions == 'sinusoidal':
      h = h + sinusoidal_positions(jnp.arange(length), self.emb_dim).astype(h.dtype)
    h = h + nn.Embed(self.type_vocab_size, self.emb_dim, embedding_init=_init, dtype=self.dtype,
                     name='type_embed')(token_type_ids)
    h = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name='embed_norm')(h)
    h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    # The sentences and the [CLS]/[SEP] positions go to a mixer whose traits say it reads them
    # (PoNet; BERT's attention does not), with the options its traits set for them.
    traits = traits_of(MIXERS[self.mixer])
    mixer_inputs = {k: v for k, v in dict(segment_ids=segment_ids, boundary_mask=boundary).items()
                    if k in traits.sentence_inputs}
    mixer_kwargs = dict(self.mixer_kwargs, kernel_init=_init)   # official: every Linear 0.02
    mixer_kwargs.update(traits.sentence_options)
    for i in range(self.num_layers):
      h = TransformerBlock(self.mixer, self.num_heads, self.mlp_dim, mixer_kwargs=mixer_kwargs,
                           dropout_rate=self.dropout_rate,
                           attention_dropout_rate=self.dropout_rate,   # BERT's attention_probs
                           activation='gelu_exact', layer_norm_epsilon=self.layer_norm_eps,
                           kernel_init=_init, post_norm=True, dtype=self.dtype,
                           rotary=self.positions == 'rotary', name=f'layer_{i}')(
                               h, mask, deterministic=deterministic, **mixer_inputs)
    return h, embed

  def pool(self, h: Array) -> Array:
    """BERT pooler: tanh(Dense(h[CLS]))."""
    return jnp.tanh(nn.Dense(self.emb_dim, dtype=self.dtype, kernel_init=_init,
                             name='pooler')(h[:, 0]))


class PoNetMLM(BertEncoderFields):
  """BERT-style PoNet encoder with the MLM and sentence-structure pre-training heads;
  `sentence_classes`: 3 = StructBERT's SSO (the paper), 2 = BERT's NSP, 0 = MLM only."""
  sentence_classes: int = SSO_CLASSES

  @nn.compact
  def __call__(self, inputs: Array, *, segment_ids: Array | None = None,
               token_type_ids: Array | None = None,
               deterministic: bool = True) -> dict[str, Array]:
    """{'mlm_logits': [B, L, V], 'sso_logits': [B, sentence_classes]} in float32 (no
    'sso_logits' for MLM only); `segment_ids` and `token_type_ids` default to the inputs'."""
    h, embed = self.encode(inputs, segment_ids, token_type_ids, deterministic)
    t = nn.Dense(self.emb_dim, dtype=self.dtype, kernel_init=_init, name='mlm_transform')(h)
    t = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name='mlm_norm')(
        nn.gelu(t, approximate=False))
    mlm_bias = self.param('mlm_bias', nn.initializers.zeros, (self.vocab_size,))
    outputs = {'mlm_logits': embed.attend(t).astype(jnp.float32) + mlm_bias}  # tied decoder
    pooled = self.pool(h)     # created for every objective: fine-tuning starts from it
    if self.sentence_classes:
      outputs['sso_logits'] = nn.Dense(self.sentence_classes, dtype=self.dtype, kernel_init=_init,
                                       name='sso_head')(pooled).astype(jnp.float32)
    return outputs


class PoNetClassifier(BertEncoderFields):
  """Fine-tuning (official PoNetForSequenceClassification): pooler -> dropout -> Dense
  'classifier' (`num_classes` = 1: regression, STS-B); every other name is PoNetMLM's."""
  num_classes: int = 2

  @nn.compact
  def __call__(self, inputs: Array, *, segment_ids: Array | None = None,
               token_type_ids: Array | None = None, deterministic: bool = True) -> Array:
    h, _ = self.encode(inputs, segment_ids, token_type_ids, deterministic)
    pooled = nn.Dropout(self.dropout_rate)(self.pool(h), deterministic=deterministic)
    return nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=_init,
                    name='classifier')(pooled).astype(jnp.float32)


_REQUIRED = ('vocab_size', 'emb_dim', 'num_layers', 'num_heads', 'mlp_dim', 'max_length')


@register_model('ponet_mlm')
def build(cfg) -> PoNetMLM:
  """`cfg` = config.model: the fields of PoNetMLM, `_REQUIRED` among them, plus 'name'."""
  model = PoNetMLM(**model_kwargs(cfg, PoNetMLM, required=_REQUIRED))
  model.check_mixer()
  return model


@register_model('ponet_classifier')
def build_classifier(cfg) -> PoNetClassifier:
  """As ponet_mlm, with 'num_classes' (1 = regression) instead of 'sentence_classes'."""
  model = PoNetClassifier(**model_kwargs(cfg, PoNetClassifier, required=_REQUIRED))
  model.check_mixer()
  return model
