"""Length-grouped micro-batches (config.length_buckets, trainer/length_buckets.py): the summed
micro-batch gradients, the updated parameters and the metric sums are the whole batch's, for
softmax attention and ContextPool at the reference protocol ('mean_padded' pooling, divided by the
data's length), on one and on two devices; cutting padding leaves the logits unchanged with either
pooling; the NaN guard holds; length-sorted evaluation gives the uncut metrics; the loop trains
with it. Dropout is off throughout: its masks follow the batch's shape, so only the dropout-free
step is the same computation. Sized for CI time: buckets of 16 and 32 tokens (two micro-step
programs per model), each model's steps compiled once for all tests of its case."""
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tiny_runs import DeviceReads, tiny_config

from poolformers_jax import config as config_lib
from poolformers_jax.config import ConfigError
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import (
  accelerators,
  length_buckets,
  setup as setup_lib,
  step as step_lib,
)
from poolformers_jax.trainer.metrics import read_metrics
from poolformers_jax.trainer.setup import make_setup

LENGTH = 32
MULTIPLE = 16     # buckets: 16 and 32 tokens
NO_DROPOUT = {'model.dropout_rate': 0.0, 'model.attention_dropout_rate': 0.0}


def _setups(family, devices, batch_size, micro_batch_size, **updates):
  """(plain setup, bucketed setup) of the tiny 1-layer model on 32-token ListOps, no dropout;
  `family` may carry a protocol ('transformer,reference'). One layer suffices: padding enters it
  as non-zero vectors (token 0's embedding plus a position), as it enters any later layer."""
  # eps=1: Adam's first update lr * g / (|g| + eps) is then nearly linear in g. With eps=1e-6 it
  # is lr * sign(g) wherever |g| >> eps, and +-lr of rounding noise where g is 0 in exact
  # arithmetic (the key bias of softmax attention), which no two summation orders agree on.
  updates = {'num_devices': devices, 'batch_size': batch_size, 'optimizer.eps': 1.0,
             **NO_DROPOUT, **updates}
  plain = tiny_config('/nonexistent', family, **updates)
  bucketed = config_lib.override(plain, **{'length_buckets.multiple': MULTIPLE,
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


def _whole_batch(setup, state, batch):
  """Written out here for the uncut batch: (mean cross-entropy, correct count, its gradient, the
  state after one optimizer step on that gradient)."""
  def loss(params):
    logits = setup.model.apply({'params': params}, batch['inputs'], deterministic=True)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch['targets']).mean()
    return ce, jnp.sum(jnp.argmax(logits, -1) == batch['targets'])

  def whole(state, batch):
    (ce, correct), grads = jax.value_and_grad(loss, has_aux=True)(state.params)
    return ce, correct, grads, state.apply_gradients(grads=grads)
  return jax.jit(whole)(state, jax.tree.map(jnp.asarray, batch))   # one program: eager is slower


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


@dataclasses.dataclass
class _Case:
  """Both forms of one model's step, compiled once for the tests of its case."""
  plain: Any
  bucketed: Any
  bucketed_step: step_lib.CompiledStep
  state: Any
  batch: dict


# (family with the reference protocol, devices, batch, micro-batch size): micro-batch rows = size
# rounded up to the device count (3 -> 4 on two devices); the last one holds zero-weight fillers.
CASES = [('transformer,reference', 1, 10, 3), ('contextpool,reference', 2, 10, 3)]


@pytest.fixture(scope='module', params=CASES, ids=lambda case: case[0].split(',')[0])
def case(request):
  family, devices, batch_size, micro_batch_size = request.param
  plain, bucketed = _setups(family, devices, batch_size, micro_batch_size)
  assert bucketed.model.pooling == 'mean_padded'            # the protocol's: sum / data's L
  state = setup_lib.create_train_state(bucketed, jax.random.PRNGKey(0))
  return _Case(plain, bucketed, step_lib.compile_train_step(bucketed), state,
               _host_batch(batch_size))


def test_accumulated_gradient_and_update_equal_the_whole_batch(case):
  state, batch, rng = case.state, case.batch, jax.random.PRNGKey(1)
  loss, correct, expected, expected_state = _whole_batch(case.plain, state, batch)

  compiled = case.bucketed_step
  micros = compiled.put(batch)
  assert {int(m['inputs'].shape[1]) for m in micros} == {MULTIPLE, LENGTH}   # really cut
  assert float(np.asarray(micros[-1]['weights']).min()) == 0.0   # and holds filler rows
  carry = compiled.run.accumulate(state, micros, rng)
  count = float(carry['sums']['count'])
  assert count == len(batch['targets'])
  _assert_trees_close(jax.tree.map(lambda g: g / count, carry['grads']), expected)
  np.testing.assert_allclose(float(carry['sums']['loss']) / count, float(loss), rtol=1e-5)

  # The whole bucketed step: one optimizer update on that gradient, one step counted, the metric
  # sums of the whole batch.
  new, acc = compiled.run(jax.tree.map(jnp.copy, state),
                          compiled.new_accumulator(case.bucketed.mesh), micros, rng)
  assert int(new.step) == int(expected_state.step) == 1
  moved = lambda new: jax.tree.map(jnp.subtract, new.params, state.params)
  _assert_trees_close(moved(new), moved(expected_state), rtol=1e-4)
  _assert_trees_close(new.opt_state, expected_state.opt_state)
  assert float(acc['sums']['count']) == count and float(acc['sums']['correct']) == int(correct)
  np.testing.assert_allclose(float(acc['sums']['loss']) / count, float(loss), rtol=1e-5)
  np.testing.assert_allclose(float(acc['grad_norm']), float(optax.global_norm(expected)),
                             rtol=1e-4)
  assert float(acc['steps']) == 1 and int(acc['first_bad_step']) == 0


def test_bucketed_step_keeps_the_nan_guard(case):
  """A NaN parameter makes the objective NaN: the step returns the state it was given, records
  step 1 as the first bad one and adds nothing to the metrics (what the loop stops on)."""
  compiled = case.bucketed_step
  poisoned = case.state.replace(params=jax.tree.map(
      lambda p: p.at[(0,) * p.ndim].set(jnp.nan), case.state.params))
  new, acc = compiled.run(jax.tree.map(jnp.copy, poisoned),
                          compiled.new_accumulator(case.bucketed.mesh),
                          compiled.put(case.batch), jax.random.PRNGKey(1))
  assert int(new.step) == 0
  jax.tree.map(np.testing.assert_array_equal, new.params, poisoned.params)   # NaN where it was
  jax.tree.map(np.testing.assert_array_equal, new.opt_state, poisoned.opt_state)
  assert int(acc['first_bad_step']) == 1 and np.isnan(float(acc['bad_loss']))
  assert float(acc['steps']) == 0 and float(acc['sums']['count']) == 0


def test_cutting_padding_leaves_the_logits_unchanged():
  """Examples of at most 16 tokens cut from 32 to 16: the same logits with 'mean' pooling, and
  with 'mean_padded' when it divides by the data's length (the bucketed setup's model), not by
  the cut (which the check does catch)."""
  batch = _host_batch(12)
  inputs = jnp.asarray(batch['inputs'][length_buckets.real_lengths(batch['inputs']) <= MULTIPLE])
  assert len(inputs) >= 3
  for pooling in ('mean', 'mean_padded'):
    _, bucketed = _setups('transformer', 1, 8, 8, **{'model.pooling': pooling})
    model = bucketed.model
    variables = model.init(jax.random.PRNGKey(2), inputs)
    apply = jax.jit(model.apply)
    whole, cut = apply(variables, inputs), apply(variables, inputs[:, :MULTIPLE])
    np.testing.assert_allclose(cut, whole, rtol=1e-5, atol=1e-6)
    if pooling == 'mean_padded':
      assert model.pool_length == LENGTH
      by_cut = jax.jit(model.clone(pool_length=None).apply)(variables, inputs[:, :MULTIPLE])
      assert not np.allclose(by_cut, whole, rtol=1e-3, atol=1e-4)


def test_sorted_eval_batches_keep_every_real_example_once_and_cut_only_padding():
  batch = _host_batch(14, seed=1)
  mask = np.arange(14) < 11                                   # 3 masked-out fillers
  batches = [{k: v[i:i + 7] for k, v in {**batch, 'mask': mask}.items()} for i in (0, 7)]
  out = list(length_buckets.sorted_batches(batches, 4, MULTIPLE))
  assert [int(b['mask'].sum()) for b in out] == [4, 4, 3] and all(len(b['mask']) == 4 for b in out)
  cuts = [b['inputs'].shape[1] for b in out]
  assert cuts == sorted(cuts) and set(cuts) == {MULTIPLE, LENGTH}
  seen = []
  for b in out:
    padded = np.pad(b['inputs'], ((0, 0), (0, LENGTH - b['inputs'].shape[1])))
    seen += [(tuple(row), int(t)) for row, t in zip(padded[b['mask']], b['targets'][b['mask']])]
  real = [(tuple(row), int(t)) for row, t in zip(batch['inputs'][mask], batch['targets'][mask])]
  assert sorted(seen) == sorted(real)


def test_bucketed_training_run_matches_the_plain_run_without_reading_the_device(
    data_dir, tmp_path):
  """The loop on micro-batches, validation and test length-sorted: the plain run's parameters
  and metrics ('mean_padded' pooling, whose divisor the cut must not change)."""
  config = tiny_config(data_dir, 'transformer', **{'model.pooling': 'mean_padded', **NO_DROPOUT,
                                                   'log_every_steps': 3})
  plain = train_and_evaluate(config, str(tmp_path / 'plain'))
  with DeviceReads() as reads:
    bucketed = train_and_evaluate(config_lib.override(config, **{
        'length_buckets.multiple': MULTIPLE, 'length_buckets.micro_batch_size': 3}),
        str(tmp_path / 'bucketed'))
  assert not reads.read_after & {1, 2} and 3 in reads.read_after   # steps 1, 2: the hot path
  assert bucketed.step == plain.step == 3 and bucketed.status == 'finished'
  _assert_trees_close(bucketed.state.params, plain.state.params, rtol=1e-4)
  (train_plain,), (train_bucketed,) = (read_metrics(str(tmp_path / d), 'train')
                                       for d in ('plain', 'bucketed'))
  np.testing.assert_allclose(train_bucketed['loss'], train_plain['loss'], rtol=1e-5)
  assert train_bucketed['accuracy'] == train_plain['accuracy']
  for split in ('validation', 'test'):
    got, want = getattr(bucketed, split), getattr(plain, split)
    assert got['count'] == want['count'] == 20 and got['accuracy'] == want['accuracy'], split
    np.testing.assert_allclose(got['loss'], want['loss'], rtol=1e-5)
  assert bucketed.train_step_memory['total'] > 0


@pytest.mark.parametrize('family,why', [('ponet', 'segments are chunks of the padded length'),
                                        ('adamra', 'floor'),
                                        ('linear_reference', "normalizer='padded_length'")])
def test_families_that_read_the_padded_length_are_refused_in_one_line(family, why):
  config = tiny_config('/nonexistent', family, **{'length_buckets.multiple': 8})
  with pytest.raises(ConfigError, match=why) as error:
    make_setup(config, need_files=False)
  assert '\n' not in str(error.value) and 'length_buckets.multiple=0' in str(error.value)


def test_one_program_reports_refuse_the_bucketed_step_in_one_line():
  _, bucketed = _setups('transformer', 1, 8, 4)
  with pytest.raises(ConfigError, match='one program per bucket length') as error:
    accelerators.export_for_cuda(bucketed)
  assert '\n' not in str(error.value)
