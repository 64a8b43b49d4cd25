"""Tasks: what a model's outputs are scored by. `TASKS` maps `DatasetInfo.task` to a `Task`: the
sums of a batch, the metrics from summed totals, the training objective, the model's input, one
training example, a `decoder` for a task that generates outputs (translation), and what
`load_run(...).predict` gives (`predicts`, `prediction`).

Every task returns *sums* over examples (or tokens), weighted 1 for real examples and 0 for the
padding that fills the last evaluation batch, so metrics summed over batches and divided once at
the end are exact whatever the batch size or device count. Sums may be arrays (a confusion
matrix); a metric that is no function of sums (Spearman's) reads per-example `rows`.

  classification.py  classification, retrieval, lm, seq2seq (cross-entropy, accuracy, top-5)
  text.py            PoNet's transfer tasks: pre-training (MLM + SSO / NSP), GLUE-style
                     classification (F1, Matthews), regression (Pearson, Spearman)
  masked_tokens.py   self-pretraining on a task's own inputs (masked- and next-token prediction)
  translation.py     the 'seq2seq' decoder: beam search, detokenized and tokenized BLEU
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax.registry import TASKS, register_task  # noqa: F401  (re-exported)

Array = jax.Array
Sums = dict[str, Array]
# One training example of a task (ShapeDtypeStructs, no batch axis), from the DatasetInfo.
Spec = jax.ShapeDtypeStruct


def inputs_spec(info) -> Spec:
  """Token ids (int32) when the data has a vocabulary, else images (float32)."""
  return Spec(tuple(info.input_shape), jnp.int32 if info.vocab_size is not None else jnp.float32)


def class_example(info) -> dict[str, Spec]:
  return {'inputs': inputs_spec(info), 'targets': Spec((), jnp.int32)}


def _inputs_only(batch: dict[str, Array]) -> Array:
  return batch['inputs']


def mean_loss(sums: Sums) -> Array:
  return sums['loss'] / jnp.maximum(sums['count'], 1.0)


def class_ids(outputs, examples) -> np.ndarray:
  """Run.predict of a classifier: the argmax of each example's logits [N]."""
  del examples
  return np.asarray(outputs).argmax(-1)


@dataclasses.dataclass(frozen=True)
class Task:
  sums: Callable[..., Sums]                           # (logits, targets, weights, label_smoothing)
  summary: Callable[..., dict[str, float]]            # (totals[, rows=...]) -> metrics
  objective: Callable[[Sums], Array] = mean_loss      # what a train step minimises
  rows: Callable[[Any, Any], dict[str, Array]] | None = None   # (outputs, targets) -> [B] each
  model_inputs: Callable[[dict[str, Array]], Any] = _inputs_only   # batch -> the model's input
  train_example: Callable[[Any], Any] = class_example      # DatasetInfo -> one training example
  # Generated outputs scored at evaluation (BLEU): built as tasks.translation.Translator is, an
  # object whose `metrics(params, split, output_path)` decodes `split`.
  decoder: Callable[..., Any] | None = None
  # Run.predict: what it returns (None: pre-training has none) and (outputs [N, ...] as numpy,
  # the N examples) -> predictions; `predict_example` (example, the dataset's settings) -> the
  # example predict feeds where it is not the evaluation's.
  predicts: str | None = None
  prediction: Callable[[Any, Any], Any] = class_ids
  predict_example: Callable[[Any, Any], Any] | None = None


def get_task(name: str) -> Task:
  return TASKS[name]


def train_example(info) -> Any:
  """One training example of the dataset (ShapeDtypeStructs, no batch axis), with the segment
  ids and positions of packed rows (DatasetInfo.packed)."""
  example = get_task(info.task).train_example(info)
  if info.packed:
    packing = {f'{key}_{what}': Spec(spec.shape, jnp.int32) for key, spec in example.items()
               for what in ('segment_ids', 'positions')}
    example = {**example, **packing}
  return example
