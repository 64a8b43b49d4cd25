"""Self-pretraining on a task's own inputs (`data.masking`): 'masked_tokens' (`lra_masked_lm`,
logits [..., L, V+1]; targets the original ids at the masked positions) and 'next_tokens'
(`lra_causal_lm`, logits [..., L, V]; target t the real token at t + 1). Targets are -1 where not
scored. Loss and accuracy are means over the scored tokens of the real examples (Amos et al.'s
cross-entropy and `accuracy_ignore_m100`); `count` is that number, `examples` the examples'.
"""
from __future__ import annotations

import jax.numpy as jnp
import optax

from poolformers_jax.tasks import Array, Sums, Task, register_task
from poolformers_jax.tasks.classification import token_example


def masked_token_sums(logits: Array, targets: Array, weights: Array,
                      label_smoothing: float = 0.0) -> Sums:
  """logits [B, ..., L, V], targets [B, ..., L] (-1: not scored: not masked, or no real next
  token), weights [B] (0: a padding example) -> summed loss, correct, count over the scored
  tokens."""
  del label_smoothing   # not part of the recipe
  per_example = weights.reshape(weights.shape + (1,) * (targets.ndim - 1))
  chosen = (targets >= 0).astype(jnp.float32) * per_example
  ids = jnp.maximum(targets, 0)
  logits = logits.astype(jnp.float32)
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, ids)
  correct = (jnp.argmax(logits, -1) == ids).astype(jnp.float32)
  return {'loss': jnp.sum(loss * chosen), 'correct': jnp.sum(correct * chosen),
          'count': jnp.sum(chosen), 'examples': jnp.sum(weights)}


def masked_token_summary(sums: dict[str, float], rows=None) -> dict[str, float]:
  del rows
  count = max(float(sums['count']), 1.0)
  return {'loss': float(sums['loss']) / count, 'accuracy': float(sums['correct']) / count,
          'count': float(sums['count']), 'examples': float(sums['examples'])}


register_task('masked_tokens', Task(masked_token_sums, masked_token_summary,
                                    train_example=token_example))
register_task('next_tokens', Task(masked_token_sums, masked_token_summary,
                                  train_example=token_example))
