"""The tasks of PoNet's transfer experiments: MLM + SSO / NSP pre-training; GLUE and long-text
classification (accuracy, F1, Matthews from one confusion matrix); STS-B regression.

pretraining          outputs {'mlm_logits' [B, L, V], 'sso_logits' [B, C] (absent for MLM
                     only)}, targets {'mlm': [B, L] original ids at the chosen positions, -1
                     elsewhere; 'sso': [B] SSO (3 classes) or NSP (2) label}. The objective is
                     the official one: mean CE over chosen tokens + mean CE over pairs.
text_classification  logits [B, C], targets [B]; one confusion matrix gives accuracy, F1
                     (binary: of class 1, as GLUE MRPC/QQP; else macro and micro F1) and
                     Matthews' correlation (CoLA; Gorodkin's multi-class form).
regression           predictions [B] (or [B, 1]), float targets [B]: MSE (the official loss),
                     Pearson from sums, Spearman from the gathered predictions (STS-B).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from poolformers_jax.tasks import Spec, Task, inputs_spec, register_task

# ------------------------------ Pre-training: MLM + sentence-structure objective (the official one)

def pretraining_example(info) -> dict[str, Any]:
  """inputs [2, L] (ids, segment ids); targets: MLM ids [L] and the sentence label."""
  length = info.input_shape[-1]
  return {'inputs': inputs_spec(info),
          'targets': {'mlm': Spec((length,), jnp.int32), 'sso': Spec((), jnp.int32)}}


def pretraining_sums(outputs, targets, weights, label_smoothing: float = 0.0):
  """Per-batch sums of the 'pretraining' task (outputs, targets: the module docstring)."""
  del label_smoothing
  logits = outputs['mlm_logits'].astype(jnp.float32)
  chosen = (targets['mlm'] >= 0).astype(jnp.float32) * weights[:, None]
  ids = jnp.maximum(targets['mlm'], 0).astype(jnp.int32)
  token_ce = optax.softmax_cross_entropy_with_integer_labels(logits, ids)
  sums = {'mlm_loss': jnp.sum(token_ce * chosen),
          'mlm_correct': jnp.sum((jnp.argmax(logits, -1) == ids) * chosen),
          'mlm_count': jnp.sum(chosen), 'count': jnp.sum(weights)}
  if 'sso_logits' in outputs:
    s_logits = outputs['sso_logits'].astype(jnp.float32)
    labels = targets['sso'].astype(jnp.int32)
    sums['sso_loss'] = jnp.sum(
        optax.softmax_cross_entropy_with_integer_labels(s_logits, labels) * weights)
    sums['sso_correct'] = jnp.sum((jnp.argmax(s_logits, -1) == labels) * weights)
  return sums


def pretraining_objective(sums):
  """The official total: MLM mean over chosen tokens + sentence-task mean over pairs."""
  loss = sums['mlm_loss'] / jnp.maximum(sums['mlm_count'], 1.0)
  if 'sso_loss' in sums:
    loss = loss + sums['sso_loss'] / jnp.maximum(sums['count'], 1.0)
  return loss


def pretraining_summary(totals, rows=None):
  del rows
  count, tokens = max(totals['count'], 1.0), max(totals['mlm_count'], 1.0)
  out = {'mlm_loss': totals['mlm_loss'] / tokens, 'mlm_accuracy': totals['mlm_correct'] / tokens,
         'count': totals['count']}
  out['loss'] = out['mlm_loss']
  if 'sso_loss' in totals:
    out['sso_loss'] = totals['sso_loss'] / count
    out['sso_accuracy'] = totals['sso_correct'] / count
    out['loss'] += out['sso_loss']
  return {k: float(v) for k, v in out.items()}


# ----------------------------------------------------------- Classification with a confusion matrix

def confusion_sums(logits, targets, weights, label_smoothing: float = 0.0):
  num_classes = logits.shape[-1]
  labels = jax.nn.one_hot(targets, num_classes, dtype=jnp.float32)
  loss = optax.softmax_cross_entropy(
      logits.astype(jnp.float32),
      optax.smooth_labels(labels, label_smoothing) if label_smoothing else labels)
  predicted = jax.nn.one_hot(jnp.argmax(logits, -1), num_classes, dtype=jnp.float32)
  confusion = jnp.einsum('b,bi,bj->ij', weights, labels, predicted)   # [true, predicted]
  return {'loss': jnp.sum(loss * weights), 'count': jnp.sum(weights), 'confusion': confusion}


def f1_scores(confusion: np.ndarray) -> np.ndarray:
  """Per-class F1 = 2 TP / (2 TP + FP + FN) (0 for a class never true nor predicted)."""
  tp = np.diag(confusion)
  denominator = confusion.sum(0) + confusion.sum(1)
  return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1e-300), 0.0)


def matthews_corrcoef(confusion: np.ndarray) -> float:
  """Gorodkin's R_K (equal to the binary MCC for two classes); 0 when undefined, as sklearn."""
  c = np.asarray(confusion, np.float64)
  n, correct = c.sum(), np.trace(c)
  true, predicted = c.sum(1), c.sum(0)
  denominator = np.sqrt((n * n - predicted @ predicted) * (n * n - true @ true))
  return float((correct * n - true @ predicted) / denominator) if denominator > 0 else 0.0


def confusion_summary(totals, rows=None):
  del rows
  confusion = np.asarray(totals['confusion'], np.float64)
  count = max(float(totals['count']), 1.0)
  f1 = f1_scores(confusion)
  out = {'loss': totals['loss'] / count, 'accuracy': np.trace(confusion) / count,
         'matthews_corrcoef': matthews_corrcoef(confusion), 'macro_f1': float(np.mean(f1)),
         'count': totals['count']}
  if confusion.shape[0] == 2:
    out['f1'] = f1[1]          # GLUE MRPC / QQP, HND, IMDb: F1 of the positive class
    out['accuracy_f1'] = (out['accuracy'] + out['f1']) / 2   # the slides' MRPC / QQP number
  else:
    out['f1'] = out['accuracy']  # micro F1 of single-label classification (Yelp-5, Arxiv-11)
  return {k: float(v) for k, v in out.items()}


# ------------------------------------------------------------------------------- Regression (STS-B)

def regression_example(info) -> dict[str, Spec]:
  return {'inputs': inputs_spec(info), 'targets': Spec((), jnp.float32)}


def _predictions(outputs):
  return outputs.reshape(outputs.shape[0], -1)[:, 0].astype(jnp.float32)


def regression_sums(outputs, targets, weights, label_smoothing: float = 0.0):
  del label_smoothing
  x, y = _predictions(outputs), targets.astype(jnp.float32)
  weighted = lambda v: jnp.sum(v * weights)
  return {'loss': weighted((x - y) ** 2), 'count': jnp.sum(weights), 'sum_x': weighted(x),
          'sum_y': weighted(y), 'sum_xx': weighted(x * x), 'sum_yy': weighted(y * y),
          'sum_xy': weighted(x * y)}


def regression_rows(outputs, targets):
  return {'prediction': _predictions(outputs), 'target': targets.astype(jnp.float32)}


def pearson_from_sums(n, sx, sy, sxx, syy, sxy) -> float:
  covariance = n * sxy - sx * sy
  denominator = np.sqrt(max(n * sxx - sx * sx, 0.0) * max(n * syy - sy * sy, 0.0))
  return float(covariance / denominator) if denominator > 0 else 0.0


def average_ranks(values: np.ndarray) -> np.ndarray:
  """Ranks 1..n, ties sharing their mean rank (scipy.stats.rankdata's 'average')."""
  _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
  first = np.concatenate([[0], np.cumsum(counts)[:-1]])
  return (first + (counts + 1) / 2.0)[inverse]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
  rx, ry = average_ranks(np.asarray(x, np.float64)), average_ranks(np.asarray(y, np.float64))
  return pearson_from_sums(len(rx), rx.sum(), ry.sum(), rx @ rx, ry @ ry, rx @ ry)


def regression_summary(totals, rows: dict | None = None):
  n = float(totals['count'])
  out = {'loss': totals['loss'] / max(n, 1.0), 'count': n,
         'pearson': pearson_from_sums(n, *(float(totals[k]) for k in
                                           ('sum_x', 'sum_y', 'sum_xx', 'sum_yy', 'sum_xy')))}
  if rows is not None:
    out['spearman'] = spearman(rows['prediction'], rows['target'])
    out['pearson_spearman'] = (out['pearson'] + out['spearman']) / 2
  return {k: float(v) for k, v in out.items()}


register_task('pretraining', Task(pretraining_sums, pretraining_summary,
                                  objective=pretraining_objective,
                                  train_example=pretraining_example))
register_task('text_classification', Task(confusion_sums, confusion_summary,
                                          predicts='class ids'))
register_task('regression', Task(regression_sums, regression_summary, rows=regression_rows,
                                 train_example=regression_example, predicts='scores',
                                 prediction=lambda outputs, examples: np.asarray(outputs).reshape(
                                     len(examples))))
