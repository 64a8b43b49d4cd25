"""Top-1 and top-5 accuracy sums: exact with padding examples, ties as lax.top_k breaks them."""
import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax.tasks import classification as tasks


def test_top5_counts_match_lax_top_k_with_ties_and_padding():
  rng = np.random.default_rng(0)
  logits = rng.integers(0, 4, size=(64, 7)).astype(np.float32)   # many ties
  targets = rng.integers(0, 7, size=64)
  weights = (np.arange(64) < 50).astype(np.float32)             # 14 padding examples
  _, top = jax.lax.top_k(jnp.asarray(logits), 5)                 # lower index first on ties
  in_top5 = (np.asarray(top) == targets[:, None]).any(-1)
  top1 = np.argmax(logits, -1) == targets
  sums = jax.jit(tasks.classification_sums)(jnp.asarray(logits), jnp.asarray(targets),
                                            jnp.asarray(weights))
  assert float(sums['correct_top5']) == in_top5[:50].sum()
  assert float(sums['correct']) == top1[:50].sum()
  summary = tasks.classification_summary({k: float(v) for k, v in sums.items()})
  assert summary['accuracy_top5'] == in_top5[:50].mean()
  assert in_top5[:50].mean() > top1[:50].mean()              # the two metrics differ here
  # Soft (mixup) targets: the class is the soft target's argmax.
  soft = np.eye(7, dtype=np.float32)[targets] * 0.7 + 0.3 / 7
  soft_sums = tasks.classification_sums(jnp.asarray(logits), jnp.asarray(soft),
                                        jnp.asarray(weights))
  assert float(soft_sums['correct_top5']) == in_top5[:50].sum()


def test_no_top5_below_five_classes_or_for_language_models():
  logits, targets, weights = jnp.zeros((3, 4)), jnp.zeros(3, jnp.int32), jnp.ones(3)
  assert 'correct_top5' not in tasks.classification_sums(logits, targets, weights)
  assert 'accuracy_top5' not in tasks.classification_summary(
      {'loss': 1.0, 'correct': 1.0, 'count': 3.0})
  lm = tasks.lm_sums(jnp.zeros((2, 3, 8)), jnp.zeros((2, 3), jnp.int32), jnp.ones(2))
  assert 'correct_top5' not in lm
