"""Optimizer factory and task losses against independent numpy formulas."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tiny_runs import tiny_config

from poolformers_jax import config as config_lib, tasks
from poolformers_jax.trainer import optim
from poolformers_jax.trainer.setup import optimizer_settings


def _settings(**updates):
  """The optimizer settings of the tiny run's config with `updates` (dotted config keys)."""
  return optimizer_settings(config_lib.override(tiny_config('/unused'), **updates))


def test_weight_decay_skips_biases_norms_and_position_embeddings():
  params = {'encoder': {'position_embedding': {'pos_embedding': jnp.ones((1, 4, 2))},
                        'token_embedding': {'embedding': jnp.ones((5, 2))},
                        'final_norm': {'scale': jnp.ones(2), 'bias': jnp.ones(2)},
                        'block_0': {'mlp': {'fc1': {'kernel': jnp.ones((2, 3)),
                                                    'bias': jnp.ones(3)}}}}}
  mask = optim.weight_decay_mask(params)['encoder']
  assert mask['token_embedding']['embedding'] and mask['block_0']['mlp']['fc1']['kernel']
  assert not mask['position_embedding']['pos_embedding'] and not mask['final_norm']['scale']
  assert not mask['final_norm']['bias'] and not mask['block_0']['mlp']['fc1']['bias']


def test_decay_applies_only_where_masked():
  config = _settings(**{'optimizer.weight_decay': 0.5, 'optimizer.schedule': 'constant',
                      'optimizer.warmup_steps': 0, 'optimizer.learning_rate': 0.1})
  params = {'dense': {'kernel': jnp.ones((2, 2)), 'bias': jnp.ones(2)}}
  tx = optim.make_optimizer(config)
  zero = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zero, tx.init(params), params)
  np.testing.assert_allclose(updates['dense']['kernel'], -0.1 * 0.5 * np.ones((2, 2)), rtol=1e-6)
  np.testing.assert_allclose(updates['dense']['bias'], 0.0)


@pytest.mark.parametrize('schedule', ['cosine', 'linear', 'constant'])
def test_warmup_then_decay(schedule):
  config = _settings(**{'optimizer.schedule': schedule, 'optimizer.warmup_steps': 10,
                      'optimizer.learning_rate': 1.0, 'num_train_steps': 110})
  lr = optim.make_schedule(config)
  expected_after = {'cosine': lambda t: 0.5 * (1 + math.cos(math.pi * t / 100)),
                    'linear': lambda t: 1 - t / 100, 'constant': lambda t: 1.0}[schedule]
  for step in (0, 5, 10):
    assert float(lr(step)) == pytest.approx(step / 10)
  for t in (25, 50, 100):
    assert float(lr(10 + t)) == pytest.approx(expected_after(t), abs=1e-6)


def test_one_cycle_matches_pytorch_onecycle_linear():
  """PyTorch's OneCycleLR(pct_start=20/100, anneal_strategy='linear'): its rise ends at step
  float(0.2 * 100) - 1 = 19, its fall at 99 (every step: test_lra_protocol.py)."""
  config = _settings(**{'optimizer.schedule': 'one_cycle', 'optimizer.warmup_steps': 20,
                      'optimizer.learning_rate': 1.0, 'num_train_steps': 100})
  lr = optim.make_schedule(config)
  assert float(lr(0)) == pytest.approx(1 / 25)
  assert float(lr(19)) == pytest.approx(1.0)
  assert float(lr(10)) == pytest.approx(1 / 25 + (1 - 1 / 25) * 10 / 19)
  assert float(lr(59)) == pytest.approx(1.0 + (4e-6 - 1.0) / 2, rel=1e-6)
  assert float(lr(99)) == pytest.approx(1 / 25 / 1e4, rel=1e-3)


def test_gradient_accumulation_equals_one_big_batch():
  """Two micro-batches with MultiSteps == one step on their union (mean loss)."""
  rng = np.random.default_rng(0)
  w0 = {'w': jnp.asarray(rng.standard_normal((3,)), jnp.float32)}
  x = jnp.asarray(rng.standard_normal((8, 3)), jnp.float32)
  loss = lambda p, xb: jnp.mean((xb @ p['w'] - 1.0) ** 2)
  kw = {'optimizer.schedule': 'constant', 'optimizer.warmup_steps': 0,
        'optimizer.learning_rate': 0.1, 'optimizer.grad_clip_norm': 1.0}
  big = optim.make_optimizer(_settings(**kw))
  acc = optim.make_optimizer(_settings(**kw, **{'optimizer.grad_accum_steps': 2}))
  u, _ = big.update(jax.grad(loss)(w0, x), big.init(w0), w0)
  expected = optax.apply_updates(w0, u)
  state, p = acc.init(w0), w0
  for xb in (x[:4], x[4:]):
    u, state = acc.update(jax.grad(loss)(p, xb), state, p)
    p = optax.apply_updates(p, u)
  np.testing.assert_allclose(p['w'], expected['w'], rtol=1e-6)


def test_classification_sums_and_label_smoothing_match_numpy():
  rng = np.random.default_rng(1)
  logits = rng.standard_normal((5, 4)).astype(np.float32)
  targets = np.array([0, 3, 1, 1, 2])
  weights = np.array([1, 1, 1, 0, 1], np.float32)
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  smooth = 0.1
  soft = np.full((5, 4), smooth / 4) + (1 - smooth) * np.eye(4)[targets]
  sums = tasks.get_task('classification').sums(jnp.asarray(logits), jnp.asarray(targets),
                                               jnp.asarray(weights), smooth)
  np.testing.assert_allclose(sums['loss'], (-(soft * log_p).sum(-1) * weights).sum(), rtol=1e-5)
  assert float(sums['correct']) == ((logits.argmax(-1) == targets) * weights).sum()
  assert float(sums['count']) == 4
  summary = tasks.get_task('lm').summary({'loss': 4.0, 'correct': 2.0, 'count': 4.0})
  assert summary['bits_per_token'] == pytest.approx(1 / math.log(2))
  with pytest.raises(ValueError, match='unknown task'):
    tasks.get_task('segmentation')
