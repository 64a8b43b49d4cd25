"""PoNet pre-training model: a BERT-style PoNet encoder with MLM and SSO heads (Tan et al., 2022).

Follows the authors' BERT version (lxchtan/PoNet, models/modeling_ponet.py), which is HuggingFace
BERT with self-attention replaced by the PoNet mixer:
- Embeddings: token + learned absolute position + token type (sentence A/B), LayerNorm, dropout.
- POST-LN blocks, as BERT: h = LN(h + Dropout(PoNet(h))); h = LN(h + Dropout(W2 gelu(W1 h))).
  (The slides do not say; the official code is BERT's post-LN. LayerNorm eps 1e-12.)
- Segments of SMP are sentences, with [CLS] and [SEP] each a segment of their own
  (`sentence_segment_ids`, the official `get_segment_index`), and [CLS]/[SEP] get no SMP/LMP term
  and stay out of local windows (the official "clsgsepg" switch, on in the released checkpoint).
- MLM head: Dense -> GELU -> LayerNorm -> logits tied to the token embedding, plus a bias.
- SSO head (StructBERT's sentence structural objective, 3 classes): BERT pooler
  tanh(Dense(h[CLS])) -> Dense(3).
- Init: normal(0.02) for every Dense and embedding, as BERT's initializer_range.

Decided here: token types are derived from the inputs when not given (type = number of [SEP]
before the token, capped at type_vocab_size - 1, so "[CLS] A [SEP]" is 0 and "B [SEP]" is 1).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.core import FrozenDict

from poolformers_jax.layers.common import Array, Dtype
from poolformers_jax.layers.ponet import PoNet
from poolformers_jax.layers.registry import mixer_fields
from poolformers_jax.models.block import model_kwargs
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


class PoNetBertLayer(nn.Module):
  """One post-LN block: PoNet mixer and feed-forward, each followed by dropout, residual, LN."""
  num_heads: int
  mlp_dim: int
  dropout_rate: float
  layer_norm_eps: float
  mixer_kwargs: Mapping[str, Any]
  dtype: Optional[Dtype] = None

  @nn.compact
  def __call__(self, h, mask, segment_ids, boundary_mask, *, deterministic: bool):
    dim = h.shape[-1]
    dropout = lambda t: nn.Dropout(self.dropout_rate)(t, deterministic=deterministic)
    norm = lambda n: nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name=n)
    # segment_num is unused: BERT input always brings sentence segment_ids.
    mixed = PoNet(num_heads=self.num_heads, segment_num=1, dtype=self.dtype, name='mixer',
                  **dict(self.mixer_kwargs))(h, mask, segment_ids=segment_ids,
                                             boundary_mask=boundary_mask, deterministic=deterministic)
    h = norm('mixer_norm')(h + dropout(mixed))
    ff = nn.Dense(self.mlp_dim, dtype=self.dtype, kernel_init=_init, name='fc1')(h)
    ff = nn.Dense(dim, dtype=self.dtype, kernel_init=_init, name='fc2')(nn.gelu(ff, approximate=False))
    return norm('mlp_norm')(h + dropout(ff))


class PoNetMLM(nn.Module):
  """BERT-style PoNet encoder with the MLM and SSO pre-training heads."""
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
  mixer_kwargs: Mapping[str, Any] = FrozenDict()
  dtype: Optional[Dtype] = None

  @nn.compact
  def __call__(self, inputs: Array, *, segment_ids: Optional[Array] = None,
               token_type_ids: Optional[Array] = None,
               deterministic: bool = True) -> dict[str, Array]:
    """`inputs`: int [B, L], 0 = padding. Returns {'mlm_logits': [B, L, V], 'sso_logits': [B, 3]}
    in float32. `segment_ids` (SMP sentences) and `token_type_ids` default to those derived
    from the [CLS]/[SEP] tokens of `inputs`."""
    if inputs.ndim != 2:
      raise ValueError(f'PoNetMLM: expected int token ids [batch, length], got shape '
                       f'{tuple(inputs.shape)}.')
    length = inputs.shape[1]
    if length > self.max_length:
      raise ValueError(f'PoNetMLM: sequence length {length} exceeds max_length {self.max_length}; '
                       f'raise model.max_length or truncate the inputs.')
    mask = inputs != 0
    boundary = (inputs == self.cls_id) | (inputs == self.sep_id)
    if segment_ids is None:
      segment_ids = sentence_segment_ids(inputs, self.cls_id, self.sep_id)
    if token_type_ids is None:
      token_type_ids = token_type_ids_from_inputs(inputs, self.sep_id, self.type_vocab_size)

    embed = nn.Embed(self.vocab_size, self.emb_dim, embedding_init=_init, dtype=self.dtype,
                     name='token_embed')
    h = (embed(inputs)
         + nn.Embed(self.max_length, self.emb_dim, embedding_init=_init, dtype=self.dtype,
                    name='position_embed')(jnp.arange(length)[None])
         + nn.Embed(self.type_vocab_size, self.emb_dim, embedding_init=_init, dtype=self.dtype,
                    name='type_embed')(token_type_ids))
    h = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name='embed_norm')(h)
    h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    for i in range(self.num_layers):
      h = PoNetBertLayer(self.num_heads, self.mlp_dim, self.dropout_rate, self.layer_norm_eps,
                         self.mixer_kwargs, self.dtype, name=f'layer_{i}')(
                             h, mask, segment_ids, boundary, deterministic=deterministic)

    t = nn.Dense(self.emb_dim, dtype=self.dtype, kernel_init=_init, name='mlm_transform')(h)
    t = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=self.dtype, name='mlm_norm')(
        nn.gelu(t, approximate=False))
    mlm_bias = self.param('mlm_bias', nn.initializers.zeros, (self.vocab_size,))
    mlm_logits = embed.attend(t).astype(jnp.float32) + mlm_bias   # tied to the token embedding

    pooled = jnp.tanh(nn.Dense(self.emb_dim, dtype=self.dtype, kernel_init=_init, name='pooler')(h[:, 0]))
    sso_logits = nn.Dense(SSO_CLASSES, dtype=self.dtype, kernel_init=_init, name='sso_head')(pooled)
    return {'mlm_logits': mlm_logits, 'sso_logits': sso_logits.astype(jnp.float32)}


def mlm_loss(outputs: dict[str, Array], batch: dict[str, Array]) -> tuple[Array, dict[str, Array]]:
  """MLM + SSO loss of PoNet pre-training (the official total is their plain sum).

  batch keys:
    'mlm_targets': int [B, L], the original token id at each position chosen for prediction
                   (any value elsewhere);
    'mlm_weights': float/bool [B, L], 1 at the positions chosen for prediction, 0 elsewhere
                   (padding, unmasked tokens); only these positions contribute;
    'sso_targets': int [B] in {0, 1, 2} (StructBERT: B follows A, B precedes A, B random).
  The MLM loss is the mean cross-entropy over the chosen positions of the whole batch; the SSO loss
  the mean over examples. Returns (loss, metrics with both parts and their accuracies).
  """
  logits = outputs['mlm_logits'].astype(jnp.float32)
  weights = batch['mlm_weights'].astype(jnp.float32)
  targets = jnp.where(weights > 0, batch['mlm_targets'], 0).astype(jnp.int32)  # e.g. -100 elsewhere
  count = jnp.maximum(jnp.sum(weights), 1.0)
  token_ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  mlm = jnp.sum(token_ce * weights) / count
  mlm_acc = jnp.sum((jnp.argmax(logits, -1) == targets) * weights) / count
  sso_logits = outputs['sso_logits'].astype(jnp.float32)
  sso_targets = batch['sso_targets'].astype(jnp.int32)
  sso = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(sso_logits, sso_targets))
  sso_acc = jnp.mean(jnp.argmax(sso_logits, -1) == sso_targets)
  return mlm + sso, {'mlm_loss': mlm, 'sso_loss': sso, 'mlm_accuracy': mlm_acc,
                     'sso_accuracy': sso_acc}


_REQUIRED = ('vocab_size', 'emb_dim', 'num_layers', 'num_heads', 'mlp_dim', 'max_length')
_OPTIONAL = ('type_vocab_size', 'dropout_rate', 'cls_id', 'sep_id', 'layer_norm_eps', 'dtype',
             'mixer_kwargs')


@register_model('ponet_mlm')
def build(cfg) -> PoNetMLM:
  """`cfg` = config.model with the keys of `_REQUIRED` (and optionally `_OPTIONAL`) plus 'name'.

  Nothing trains it yet: it waits for the PoNet pre-training task (MLM + SSO data and a config,
  built on top of `mlm_loss`); the layer parity and the losses are tested here."""
  unknown = sorted(set(cfg.keys()) - set(_REQUIRED) - set(_OPTIONAL) - {'name', 'mixer'})
  if unknown:
    raise ValueError(f'ponet_mlm: unknown model config keys {unknown}; valid keys: '
                     f'{sorted(_REQUIRED + _OPTIONAL)}.')
  missing = [k for k in _REQUIRED if k not in cfg]
  if missing:
    raise ValueError(f'ponet_mlm: model config is missing {missing}.')
  if cfg.get('mixer', 'ponet') != 'ponet':
    raise ValueError(f"ponet_mlm: mixer must be 'ponet' (it needs sentence segments), "
                     f"got {cfg.mixer!r}.")
  mixer_kwargs = cfg.get('mixer_kwargs', None) or {}
  if hasattr(mixer_kwargs, 'to_dict'):
    mixer_kwargs = mixer_kwargs.to_dict()
  allowed = mixer_fields(PoNet) - {'num_heads', 'segment_num', 'dtype'}  # set by the model
  bad = sorted(set(mixer_kwargs) - allowed)
  if bad:
    raise ValueError(f'ponet_mlm: mixer_kwargs {bad} are not PoNet options this model takes; '
                     f'valid: {sorted(allowed)}.')
  kwargs = model_kwargs(cfg, PoNetMLM, ignore=('mixer', 'mixer_kwargs'))
  return PoNetMLM(mixer_kwargs=FrozenDict(mixer_kwargs), **kwargs)
