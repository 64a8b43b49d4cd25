"""Length-grouped micro-batches (config.length_buckets, train/length_buckets.py): the summed
micro-batch gradients, the updated parameters and the metric sums are the whole batch's, for
softmax attention and ContextPool, with 'mean' and the reference's 'mean_padded' pooling, on one
and on several devices; length-sorted evaluation gives the uncut metrics; the loop trains with it.
Dropout is off throughout: its masks follow the batch's shape, so only the dropout-free step is
the same computation."""
import dataclasses
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from test_robust import DIVERGING, _NoDeviceToHost
from tiny_runs import tiny_config
from poolformers_jax.train import (NonFiniteLossError, accelerators, config_utils, length_buckets,
                                   loop)
from poolformers_jax.train import state as state_lib
from poolformers_jax.train import step as step_lib
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.train.metrics import read_metrics
from poolformers_jax.train.setup import make_setup
from poolformers_jax.train.validate import ConfigError

evaluate_lib = importlib.import_module('poolformers_jax.train.evaluate')

LENGTH = 32
NO_DROPOUT = {'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0}


def _setups(family, pooling, devices, batch_size, micro_batch_size):
  """(plain setup, bucketed setup) of a 2-layer tiny model on 32-token ListOps, no dropout."""
  # eps=1: Adam's first update lr * g / (|g| + eps) is then nearly linear in g. With eps=1e-6 it
  # is lr * sign(g) wherever |g| >> eps, and +-lr of rounding noise where g is 0 in exact
  # arithmetic (the key bias of softmax attention), which no two summation orders agree on.
  updates = {'num_devices': devices, 'batch_size': batch_size, 'model.pooling': pooling,
             'model.num_layers': 2, 'optimizer.eps': 1.0, **NO_DROPOUT}
  plain = tiny_config('/nonexistent', family, **updates)
  bucketed = config_utils.override(plain, **{'length_buckets.multiple': 8,
                                             'length_buckets.micro_batch_size': micro_batch_size})
  return make_setup(plain, need_files=False), make_setup(bucketed, need_files=False)


def _host_batch(batch_size, seed=0):
  """Token ids with real lengths 1..32 (one of each extreme), right-padded with 0."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, LENGTH + 1, batch_size)
  lengths[:2] = LENGTH, 3
  tokens = rng.integers(1, 18, (batch_size, LENGTH))
  inputs = np.where(np.arange(LENGTH)[None] < lengths[:, None], tokens, 0).astype(np.int32)
  return {'inputs': inputs, 'targets': rng.integers(0, 10, batch_size).astype(np.int32)}


def _whole_batch_gradient(setup, params, batch):
  """The gradient of the mean cross-entropy of the uncut batch, written out here."""
  def loss(p):
    logits = setup.model.apply({'params': p}, jnp.asarray(batch['inputs']), deterministic=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch['targets']).mean()
  return jax.value_and_grad(loss)(params)


def _assert_trees_close(actual, expected, rtol=2e-5):
  """Every leaf within rtol of the largest entry of `expected` (a leaf whose true value is 0,
  e.g. the key bias of softmax attention, holds only rounding noise)."""
  scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(expected))
  jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=0, atol=rtol * scale),
               actual, expected)


def test_host_split_keeps_every_example_once_and_cuts_only_padding():
  batch = _host_batch(10)
  batch['inputs'][4, [2, 5]] = 0                # zeros inside an example are not its end
  micros = length_buckets.micro_batches(batch, micro_batch_size=3, devices=2, multiple=8)
  assert [m['inputs'].shape[0] for m in micros] == [4, 4, 2 + 2]    # 3 -> 4 rows (2 devices)
  cuts = [m['inputs'].shape[1] for m in micros]
  assert cuts == sorted(cuts) and set(cuts) <= {8, 16, 24, 32} and cuts[0] < 32
  lengths = length_buckets.real_lengths(batch['inputs'])
  assert lengths[4] == length_buckets.real_lengths(batch['inputs'][4:5, :lengths[4]])[0] > 5
  seen = []
  for m in micros:
    real = m['weights'] == 1
    assert np.all(m['weights'][~real] == 0) and real.sum() >= 1
    padded = np.pad(m['inputs'], ((0, 0), (0, LENGTH - m['inputs'].shape[1])))
    seen += [(tuple(row), int(t)) for row, t in zip(padded[real], m['targets'][real])]
  whole = [(tuple(row), int(t)) for row, t in zip(batch['inputs'], batch['targets'])]
  assert sorted(seen) == sorted(whole)          # every example once, no token cut off


# (family, pooling, devices, batch, micro-batch size): micro-batch rows = size rounded up to
# the device count; the last micro-batch is filled with zero-weight rows in every case.
CASES = [('transformer', 'mean', 1, 10, 3), ('transformer', 'mean_padded', 8, 24, 10),
         ('contextpool', 'mean', 8, 24, 10), ('contextpool', 'mean_padded', 2, 10, 3)]


@pytest.mark.parametrize('family,pooling,devices,batch_size,micro_batch_size', CASES)
def test_accumulated_gradient_and_update_equal_the_whole_batch(family, pooling, devices,
                                                               batch_size, micro_batch_size):
  plain, bucketed = _setups(family, pooling, devices, batch_size, micro_batch_size)
  state = state_lib.create_train_state(bucketed.model, bucketed.tx, bucketed.info,
                                       jax.random.PRNGKey(0), bucketed.mesh)
  batch, rng = _host_batch(batch_size), jax.random.PRNGKey(1)
  loss, expected = _whole_batch_gradient(plain, state.params, batch)

  compiled = step_lib.compile_train_step(bucketed)
  micros = compiled.put(batch)
  cuts = {int(m['inputs'].shape[1]) for m in micros}
  assert len(cuts) > 1 and min(cuts) < LENGTH          # the batch really is cut
  assert float(np.asarray(micros[-1]['weights']).min()) == 0.0   # and holds filler rows
  carry = compiled.run.accumulate(state, micros, rng)
  count = float(carry['sums']['count'])
  assert count == batch_size
  _assert_trees_close(jax.tree.map(lambda g: g / count, carry['grads']), expected)
  np.testing.assert_allclose(float(carry['sums']['loss']) / count, float(loss), rtol=1e-5)

  # One optimizer step each way: parameters, optimizer state and the metric sums agree.
  plain_step = step_lib.compile_train_step(plain)
  plain_state = state.replace(apply_fn=plain.model.apply, tx=plain.tx)   # its static fields
  new_plain, acc_plain = plain_step.run(jax.tree.map(jnp.copy, plain_state),
                                        plain_step.new_accumulator(plain.mesh),
                                        plain_step.put(batch), rng)
  new_bucketed, acc_bucketed = compiled.run(jax.tree.map(jnp.copy, state),
                                            compiled.new_accumulator(bucketed.mesh), micros, rng)
  assert int(new_bucketed.step) == int(new_plain.step) == 1
  moved = lambda new: jax.tree.map(jnp.subtract, new.params, state.params)
  _assert_trees_close(moved(new_bucketed), moved(new_plain), rtol=1e-4)
  _assert_trees_close(new_bucketed.opt_state, new_plain.opt_state)
  for key in ('count', 'correct', 'correct_top5'):
    assert float(acc_bucketed['sums'][key]) == float(acc_plain['sums'][key]), key
  np.testing.assert_allclose(float(acc_bucketed['sums']['loss']), float(acc_plain['sums']['loss']),
                             rtol=1e-5)
  np.testing.assert_allclose(float(acc_bucketed['grad_norm']), float(acc_plain['grad_norm']),
                             rtol=1e-4)
  assert float(acc_bucketed['steps']) == 1 and int(acc_bucketed['first_bad_step']) == 0

  if pooling == 'mean_padded':   # the check can fail: dividing by the cut length is caught
    cut_divisor = dataclasses.replace(bucketed, model=bucketed.model.clone(pool_length=None))
    wrong = step_lib.BucketedStep(cut_divisor).accumulate(state, micros, rng)
    with pytest.raises(AssertionError):
      _assert_trees_close(jax.tree.map(lambda g: g / count, wrong['grads']), expected)


@pytest.mark.parametrize('family,pooling', [('transformer', 'mean'),
                                            ('contextpool', 'mean_padded')])
def test_length_sorted_evaluation_gives_the_uncut_metrics(data_dir, family, pooling):
  config = tiny_config(data_dir, family, **{'model.pooling': pooling, 'num_devices': 2,
                                            'eval_batch_size': 6, **NO_DROPOUT})
  plain = make_setup(config)
  bucketed = make_setup(config_utils.override(config, **{'length_buckets.multiple': 8}))
  state = state_lib.create_train_state(plain.model, plain.tx, plain.info, jax.random.PRNGKey(3),
                                       plain.mesh)
  sorted_batches = list(length_buckets.sorted_batches(
      evaluate_lib.data.make_eval_iterator(config, 'validation', 6), 6, 8))
  assert min(b['inputs'].shape[1] for b in sorted_batches) < LENGTH
  assert sum(int(b['mask'].sum()) for b in sorted_batches) == 20    # 20 examples, 4 batches
  expected = evaluate_lib.evaluate_state(plain, state, 'validation')
  metrics = evaluate_lib.evaluate_state(
      bucketed, state.replace(apply_fn=bucketed.model.apply, tx=bucketed.tx), 'validation')
  assert metrics['count'] == expected['count'] == 20
  assert metrics['accuracy'] == expected['accuracy']
  np.testing.assert_allclose(metrics['loss'], expected['loss'], rtol=1e-5)


def test_bucketed_training_run_matches_the_plain_run_without_reading_the_device(
    data_dir, tmp_path, monkeypatch):
  config = tiny_config(data_dir, 'contextpool', **{'model.pooling': 'mean_padded', **NO_DROPOUT,
                                                   'log_every_steps': 3})
  plain = train_and_evaluate(config, str(tmp_path / 'plain'))
  monkeypatch.setattr(loop, 'HOT_PATH_GUARD', _NoDeviceToHost)
  _NoDeviceToHost.entered = 0
  bucketed = train_and_evaluate(config_utils.override(config, **{
      'length_buckets.multiple': 8, 'length_buckets.micro_batch_size': 3}),
      str(tmp_path / 'bucketed'))
  assert _NoDeviceToHost.entered == 2                  # steps 1 and 2 ran on the hot path
  assert bucketed.step == plain.step == 3 and bucketed.status == 'finished'
  _assert_trees_close(bucketed.state.params, plain.state.params, rtol=1e-4)
  (train_plain,), (train_bucketed,) = (read_metrics(str(tmp_path / d), 'train')
                                       for d in ('plain', 'bucketed'))
  np.testing.assert_allclose(train_bucketed['loss'], train_plain['loss'], rtol=1e-5)
  assert train_bucketed['accuracy'] == train_plain['accuracy']
  assert bucketed.test['accuracy'] == plain.test['accuracy']
  assert bucketed.train_step_memory['total'] > 0


def test_bucketed_step_keeps_the_nan_guard(data_dir, tmp_path):
  config = tiny_config(data_dir, num_train_steps=6, checkpoint_every_steps=100,
                       eval_every_steps=100, log_every_steps=100, num_devices=1, **DIVERGING,
                       **{'length_buckets.multiple': 8, 'length_buckets.micro_batch_size': 3})
  with pytest.raises(NonFiniteLossError, match='at step 2: stopped without saving anything'):
    train_and_evaluate(config, str(tmp_path))


@pytest.mark.parametrize('family,why', [('ponet', 'segments are chunks of the padded length'),
                                        ('adamra', 'floor'), ('msac', 'not shown to ignore padding')])
def test_families_that_read_the_padded_length_are_refused_in_one_line(family, why):
  config = tiny_config('/nonexistent', family, **{'length_buckets.multiple': 8})
  with pytest.raises(ConfigError, match=why) as error:
    make_setup(config, need_files=False)
  assert '\n' not in str(error.value) and 'length_buckets.multiple=0' in str(error.value)


def test_one_program_reports_refuse_the_bucketed_step_in_one_line():
  _, bucketed = _setups('transformer', 'mean', 1, 8, 4)
  with pytest.raises(ConfigError, match='one program per bucket length') as error:
    accelerators.export_for_cuda(bucketed)
  assert '\n' not in str(error.value)
