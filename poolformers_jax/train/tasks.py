"""Loss and metrics per task: `TASKS` maps `DatasetInfo.task` to a `Task`. No if/elif chains.

Every task returns *sums* over examples (or tokens) weighted by a per-example weight (1 for real
examples, 0 for the padding examples that fill the last evaluation batch), so metrics summed
over batches and divided once at the end are exact whatever the batch size or device count.
Sums may be arrays (a confusion matrix); the training objective of a batch is
`task.objective(sums)` (default: summed loss / count). A metric that is no function of sums
(Spearman's rank correlation) reads per-example `rows` that evaluation gathers once per split.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from poolformers_jax.registry import TASKS, register_task
from poolformers_jax.train import text_tasks

Array = jax.Array
Sums = dict[str, Array]


def _is_soft(logits: Array, targets: Array) -> bool:
  """Soft targets [B, C] (mixup / cutmix, already smoothed) rather than class ids [B]."""
  return targets.shape == logits.shape


def _cross_entropy(logits: Array, targets: Array, num_classes: int, label_smoothing: float) -> Array:
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
  """logits [B, C], targets [B] (or soft targets [B, C]), weights [B] -> summed loss, correct
  and count, and `correct_top5` when C >= 5 (and `top_k`). Soft targets are used as given
  (label_smoothing ignored); correct = the argmax of the logits is the argmax of the soft target
  (the majority class of a mixed example)."""
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


def _inputs_only(batch: dict[str, Array]) -> Array:
  return batch['inputs']


def _all_but_mask(batch: dict[str, Array]) -> dict[str, Array]:
  """The encoder-decoder reads the targets (teacher forcing) and the packing arrays."""
  return {k: v for k, v in batch.items() if k != 'mask'}


# One training example of a task (ShapeDtypeStructs, no batch axis), from the DatasetInfo.
Spec = jax.ShapeDtypeStruct


def inputs_spec(info) -> Spec:
  """Token ids (int32) when the data has a vocabulary, else images (float32)."""
  return Spec(tuple(info.input_shape), jnp.int32 if info.vocab_size is not None else jnp.float32)


def class_example(info) -> dict[str, Spec]:
  return {'inputs': inputs_spec(info), 'targets': Spec((), jnp.int32)}


def token_example(info) -> dict[str, Spec]:
  """Next-token targets (LM) or target ids (seq2seq) as long as the inputs."""
  return {'inputs': inputs_spec(info), 'targets': Spec(tuple(info.input_shape), jnp.int32)}


def regression_example(info) -> dict[str, Spec]:
  return {'inputs': inputs_spec(info), 'targets': Spec((), jnp.float32)}


def pretraining_example(info) -> dict[str, Any]:
  """inputs [2, L] (ids, segment ids); targets: MLM ids [L] and the sentence label."""
  length = info.input_shape[-1]
  return {'inputs': inputs_spec(info),
          'targets': {'mlm': Spec((length,), jnp.int32), 'sso': Spec((), jnp.int32)}}


def _bleu_metrics(setup, state, split: str, output_path: Optional[str] = None) -> dict[str, Any]:
  from poolformers_jax.train import translation_eval  # pylint: disable=g-import-not-at-top
  return translation_eval.bleu_metrics(setup, state, split, output_path)


def mean_loss(sums: Sums) -> Array:
  return sums['loss'] / jnp.maximum(sums['count'], 1.0)


@dataclasses.dataclass(frozen=True)
class Task:
  sums: Callable[..., Sums]                           # (logits, targets, weights, label_smoothing)
  summary: Callable[..., dict[str, float]]            # (totals[, rows=...]) -> metrics
  objective: Callable[[Sums], Array] = mean_loss      # what a train step minimises
  rows: Optional[Callable[[Any, Any], dict[str, Array]]] = None   # (outputs, targets) -> [B] each
  model_inputs: Callable[[dict[str, Array]], Any] = _inputs_only   # batch -> the model's input
  train_example: Callable[[Any], Any] = class_example      # DatasetInfo -> one training example
  decoded_metrics: Optional[Callable[..., dict[str, Any]]] = None   # (setup, state, split,
                                # output_path) -> metrics of generated outputs (BLEU); the
                                # outputs are written to output_path (one line each) if given


register_task('classification', Task(classification_sums, classification_summary))
register_task('retrieval', Task(classification_sums, classification_summary))  # model takes pairs
register_task('lm', Task(lm_sums, lm_summary, train_example=token_example))
register_task('seq2seq', Task(seq2seq_sums, seq2seq_summary, model_inputs=_all_but_mask,
                             train_example=token_example, decoded_metrics=_bleu_metrics))


# PoNet's transfer experiments (text_tasks.py): MLM + SSO/NSP pre-training; GLUE and long-text
# classification (accuracy, F1, Matthews from one confusion matrix); STS-B regression.
register_task('pretraining', Task(text_tasks.pretraining_sums, text_tasks.pretraining_summary,
                                  objective=text_tasks.pretraining_objective,
                                  train_example=pretraining_example))
register_task('text_classification', Task(text_tasks.confusion_sums, text_tasks.confusion_summary))
register_task('regression', Task(text_tasks.regression_sums, text_tasks.regression_summary,
                                 rows=text_tasks.regression_rows, train_example=regression_example))


def get_task(name: str) -> Task:
  return TASKS[name]


def train_example(info) -> Any:
  """One training example of the dataset (ShapeDtypeStructs, no batch axis): the task's arrays,
  and, when the rows are packed (DatasetInfo.packed), the segment ids and positions grain's
  packing adds beside each of them."""
  example = get_task(info.task).train_example(info)
  if info.packed:
    packing = {f'{key}_{what}': Spec(spec.shape, jnp.int32) for key, spec in example.items()
               for what in ('segment_ids', 'positions')}
    example = {**example, **packing}
  return example
