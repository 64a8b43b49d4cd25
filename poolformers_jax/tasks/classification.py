"""Cross-entropy tasks: classification (top-1 and top-5), retrieval (a classifier of pairs), lm
(bits per token) and seq2seq (perplexity; BLEU through the translation decoder).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from poolformers_jax.data.base import fit_length
from poolformers_jax.tasks import Array, Spec, Sums, Task, inputs_spec, register_task
from poolformers_jax.tasks.translation import Translator


def _is_soft(logits: Array, targets: Array) -> bool:
  """Soft targets [B, C] (mixup / cutmix, already smoothed) rather than class ids [B]."""
  return targets.shape == logits.shape


def _cross_entropy(logits: Array, targets: Array, num_classes: int,
                   label_smoothing: float) -> Array:
  if _is_soft(logits, targets):
    labels = targets.astype(jnp.float32)
  else:
    labels = jax.nn.one_hot(targets, num_classes, dtype=jnp.float32)
    if label_smoothing:
      labels = optax.smooth_labels(labels, label_smoothing)
  return optax.softmax_cross_entropy(logits.astype(jnp.float32), labels)


TOP_K = 5   # every ImageNet table reports top-1 and top-5


def _rank(logits: Array, classes: Array) -> Array:
  """Position of the target class in the logits sorted descending, ties broken by lower class
  index first (as argmax and lax.top_k do): top-k correct <=> rank < k."""
  target = jnp.take_along_axis(logits, classes[:, None], axis=-1)
  ahead = (logits > target) | ((logits == target)
                               & (jnp.arange(logits.shape[-1]) < classes[:, None]))
  return jnp.sum(ahead, axis=-1)


def classification_sums(logits: Array, targets: Array, weights: Array,
                        label_smoothing: float = 0.0, top_k: bool = True) -> Sums:
  """logits [B, C], targets [B] (or soft targets [B, C], used as given), weights [B] -> summed
  loss, correct (a soft target's argmax) and count, and `correct_top5` when C >= 5."""
  loss = _cross_entropy(logits, targets, logits.shape[-1], label_smoothing)
  classes = jnp.argmax(targets, -1) if _is_soft(logits, targets) else targets
  correct = (jnp.argmax(logits, -1) == classes).astype(jnp.float32)
  sums = {'loss': jnp.sum(loss * weights), 'correct': jnp.sum(correct * weights),
          'count': jnp.sum(weights)}
  if top_k and logits.shape[-1] >= TOP_K:
    in_top = (_rank(logits, classes) < TOP_K).astype(jnp.float32)
    sums[f'correct_top{TOP_K}'] = jnp.sum(in_top * weights)
  return sums


def lm_sums(logits: Array, targets: Array, weights: Array, label_smoothing: float = 0.0) -> Sums:
  """logits [B, L, V], targets [B, L]; weights [B] (every token of a real example counts) or
  per token [B, L] (sliding evaluation scores only a window's new tokens)."""
  token_weights = jnp.broadcast_to(weights if weights.ndim == 2 else weights[:, None],
                                   targets.shape)
  return classification_sums(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                             token_weights.reshape(-1), label_smoothing, top_k=False)


def classification_summary(sums: dict[str, float]) -> dict[str, float]:
  count = max(sums['count'], 1.0)
  out = {'loss': sums['loss'] / count, 'accuracy': sums['correct'] / count,
         'count': sums['count']}
  if f'correct_top{TOP_K}' in sums:
    out[f'accuracy_top{TOP_K}'] = sums[f'correct_top{TOP_K}'] / count
  return out


def lm_summary(sums: dict[str, float]) -> dict[str, float]:
  out = classification_summary(sums)
  out['bits_per_token'] = out['loss'] / math.log(2.0)
  return out


def seq2seq_sums(logits: Array, targets: Array, weights: Array,
                 label_smoothing: float = 0.0) -> Sums:
  """logits [B, L, V], targets [B, L] with 0 = padding (packed rows too): every real target
  token of a real example counts once."""
  token_weights = weights[:, None] * (targets > 0).astype(jnp.float32)
  return classification_sums(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                             token_weights.reshape(-1), label_smoothing)


def seq2seq_summary(sums: dict[str, float]) -> dict[str, float]:
  out = classification_summary(sums)
  out['perplexity'] = math.exp(min(out['loss'], 50.0))
  return out


def _all_but_mask(batch: dict[str, Array]) -> dict[str, Array]:
  """The encoder-decoder reads the targets (teacher forcing) and the packing arrays."""
  return {k: v for k, v in batch.items() if k != 'mask'}


def token_example(info) -> dict[str, Spec]:
  """Next-token targets (LM) or target ids (seq2seq) as long as the inputs."""
  return {'inputs': inputs_spec(info), 'targets': Spec(tuple(info.input_shape), jnp.int32)}


def next_symbol_example(example, settings) -> dict[str, np.ndarray]:
  """What an LM predicts from: the text's symbols padded after it (a causal model: padding never
  reaches back), `last` its last position; a text longer than max_length keeps its last symbols
  (too_long='truncate') or is refused."""
  ids, length = example['inputs'], int(settings.max_length)
  if len(ids) > length:
    if settings.too_long == 'error':
      raise ValueError(f"text has {len(ids)} symbols > config.data.max_length={length}, too "
                       "long for this run's model; shorten it, or pass too_long='truncate' to "
                       'keep its last symbols')
    ids = ids[-length:]   # the symbols just before the predicted one
  return {'inputs': fit_length(ids, length, 'error'), 'last': np.int32(len(ids) - 1)}


def next_symbol_probabilities(outputs, examples) -> np.ndarray:
  """The distribution of the symbol after each text [N, vocab]."""
  last = np.asarray([e['last'] for e in examples])
  return np.asarray(jax.nn.softmax(outputs[np.arange(len(examples)), last], axis=-1))


register_task('classification', Task(classification_sums, classification_summary,
                                     predicts='class ids'))
register_task('retrieval', Task(classification_sums, classification_summary,  # model takes pairs
                                predicts='class ids'))
register_task('lm', Task(lm_sums, lm_summary, train_example=token_example,
                         predicts='next-symbol probabilities',
                         prediction=next_symbol_probabilities,
                         predict_example=next_symbol_example))
register_task('seq2seq', Task(seq2seq_sums, seq2seq_summary, model_inputs=_all_but_mask,
                             train_example=token_example, decoder=Translator,
                             predicts='translations'))

