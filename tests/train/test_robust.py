"""Checkpoints that never lie (integrity records, fallback, mismatch), the NaN guard, the hot path.

Damage is done by the tests to copies of one tiny run's checkpoints (steps 2 and 4); resume is
exercised at the Checkpointer level (no compile) and once end to end.
"""
import json
import logging
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_runs import REPO, DeviceReads, tiny_config, tiny_overrides

from poolformers_jax import average, config as config_lib, data
from poolformers_jax.eval import evaluate
from poolformers_jax.train import NonFiniteLossError, train_and_evaluate
from poolformers_jax.trainer import (
  checkpoint as checkpoint_lib,
  init_from,
  integrity,
  step as step_lib,
)
from poolformers_jax.trainer.metrics import read_metrics
from poolformers_jax.trainer.setup import make_setup

STEPS = dict(num_train_steps=4, eval_every_steps=2, checkpoint_every_steps=2, num_devices=1)


@pytest.fixture(scope='module')
def pristine(data_dir, tmp_path_factory):
  config = tiny_config(data_dir, **STEPS)
  workdir = str(tmp_path_factory.mktemp('pristine'))
  train_and_evaluate(config, workdir)
  return config, workdir, make_setup(config)


@pytest.fixture
def run(pristine, tmp_path):
  config, workdir, setup = pristine
  copy = str(tmp_path / 'run')
  shutil.copytree(workdir, copy)
  return config, copy, setup


def _data_file(step_dir):
  """The OCDBT data file a restore reads (the per-process files are merged into state/d/)."""
  root = os.path.join(step_dir, 'state', 'd')
  return max((os.path.join(root, f) for f in os.listdir(root)), key=os.path.getsize)


def _flip_bit(step_dir):
  path = _data_file(step_dir)
  raw = bytearray(open(path, 'rb').read())
  raw[len(raw) // 2] ^= 0x10
  open(path, 'wb').write(bytes(raw))


def _overwrite_64(step_dir):
  path = _data_file(step_dir)
  with open(path, 'r+b') as f:
    f.seek(os.path.getsize(path) // 3)
    f.write(bytes(range(64)))


def _truncate(step_dir):
  path = _data_file(step_dir)
  os.truncate(path, os.path.getsize(path) // 2)


def _garbage_iterator_json(step_dir):
  (name,) = [f for f in os.listdir(os.path.join(step_dir, 'data')) if f.endswith('.json')]
  path = os.path.join(step_dir, 'data', name)
  size = os.path.getsize(path)
  open(path, 'w').write('x' * size)                        # same size: only the CRC can tell


DAMAGE = {   # name -> (how, what the one-line reason says)
    'bit_flip': (_flip_bit, r'state/d/\w+ differs from what was written \(CRC-32\)'),
    'overwrite_64_bytes': (_overwrite_64, r'state/d/\w+ differs from what was written \(CRC-32\)'),
    'truncated_data_file': (_truncate, r'state/d/\w+ has \d+ bytes, \d+ were written'),
    'deleted_metadata': (lambda d: os.remove(os.path.join(d, 'state', '_METADATA')),
                         r'state/_METADATA is missing'),
    'deleted_state_item': (lambda d: shutil.rmtree(os.path.join(d, 'state')),
                           r'state/\S+ is missing'),
    'empty_manifest': (lambda d: open(os.path.join(d, 'state', 'manifest.ocdbt'), 'w').close(),
                       r'state/manifest.ocdbt has 0 bytes'),
    'garbage_iterator_json': (_garbage_iterator_json,
                              r'data/process_0-of-1.json differs from what was written'),
}


def _resume(config, workdir, setup, **kwargs):
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=2,
                                             config_sha256=config_lib.config_hash(config))
  iterator = data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                      seed=config.seed)
  try:
    return checkpointer.restore_for_resume(setup.abstract_state, iterator, **kwargs), iterator
  finally:
    checkpointer.close()


@pytest.mark.parametrize('case', sorted(DAMAGE))
def test_damaged_latest_falls_back_to_the_previous_checkpoint(run, case, caplog):
  config, workdir, setup = run
  damage, reason = DAMAGE[case]
  damage(os.path.join(workdir, 'checkpoints', '4'))
  with caplog.at_level(logging.WARNING):
    (state, step), iterator = _resume(config, workdir, setup)
  assert step == 2 and int(state.step) == 2
  (line,) = [r.getMessage() for r in caplog.records if 'is damaged' in r.getMessage()]
  assert line.startswith('checkpoint 4 is damaged (') and line.endswith('); falling back to 2')
  assert __import__('re').search(reason, line), line
  # Moved aside, not deleted; the good one is untouched and its data position restored.
  assert os.listdir(os.path.join(workdir, 'checkpoints')) == ['2']
  assert os.path.isdir(os.path.join(workdir, 'rejected', 'checkpoints-4'))
  assert iterator.get_state() == _position_after(config, 2)


def _position_after(config, steps):
  iterator = data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                      seed=config.seed)
  for _ in range(steps):
    next(iterator)
  return iterator.get_state()


def test_leaf_checksums_name_a_flipped_bit_and_do_not_depend_on_sharding(pristine):
  config, workdir, setup = pristine
  step_dir = os.path.join(workdir, 'checkpoints', '4')
  record = integrity.read_record(step_dir)
  checkpointer = checkpoint_lib.Checkpointer(
      workdir, read_only=True, config_sha256=config_lib.config_hash(config))
  state, _ = checkpointer.restore_state('4', setup.abstract_state)
  checkpointer.close()
  integrity.verify_leaves(record, state)                          # intact: passes
  # The same arrays split over 8 devices give the same sums (wrapping integer sums are order-free).
  from jax.sharding import NamedSharding, PartitionSpec as P
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ('data',))
  split = lambda x: jax.device_put(
      x, NamedSharding(mesh, P('data') if x.ndim and x.shape[0] % 8 == 0 else P()))
  on8 = jax.tree.map(split, state)
  assert any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(on8))
  assert integrity.leaf_records(on8) == record['leaves']
  # One bit of one parameter, as an undetected read error would leave it: named by the sums.
  kernel = np.array(state.params['encoder']['block_0']['MultiHeadAttention_0']['key']['kernel'])
  kernel.view(np.uint32)[3, 5] ^= 1 << 30
  params = jax.tree.map(lambda x: x, state.params)
  params['encoder']['block_0']['MultiHeadAttention_0']['key']['kernel'] = jnp.asarray(kernel)
  with pytest.raises(integrity.CheckpointDamaged,
                     match='checksum of params/encoder/block_0/MultiHeadAttention_0/key/kernel '
                           'differs'):
    integrity.verify_leaves(record, state.replace(params=params))


def test_empty_numbered_directory_is_skipped(run, caplog):
  config, workdir, setup = run
  os.mkdir(os.path.join(workdir, 'checkpoints', '52'))
  with caplog.at_level(logging.WARNING):
    (_, step), _ = _resume(config, workdir, setup)
  assert step == 4
  assert ['checkpoint 52 is damaged (it has no integrity.json (its save did not finish)); '
          'falling back to 4'] == [r.getMessage() for r in caplog.records
                                   if 'damaged' in r.getMessage()]


def test_no_checkpoint_verifies_stops_unless_asked_to_start_over(run):
  config, workdir, setup = run
  _flip_bit(os.path.join(workdir, 'checkpoints', '4'))
  _truncate(os.path.join(workdir, 'checkpoints', '2'))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match=r'no checkpoint in \S+ verifies \(damaged: checkpoints-2, '
                           r'checkpoints-4, moved to \S+rejected\); run again with --start_over'):
    _resume(config, workdir, setup)
  # Everything was moved aside: a second attempt still refuses to train from scratch...
  with pytest.raises(checkpoint_lib.CheckpointError, match='--start_over'):
    _resume(config, workdir, setup)
  # ...until asked.
  assert _resume(config, workdir, setup, start_over=True)[0] is None


def test_checkpoint_of_another_model_fails_naming_the_parameter_and_shapes(run):
  config, workdir, _ = run
  other = make_setup(config_lib.override(config, **{'model.dim': 24}))
  with pytest.raises(integrity.CheckpointMismatch,
                     match=r'made by a different model: params/\S+ has shape \([\d, ]+\) there '
                           r'and \([\d, ]+\) in this config') as error:
    _resume(config, workdir, other)
  assert '24' in str(error.value) and '\n' not in str(error.value)
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoints'))) == ['2', '4']   # not rejected


def test_commands_that_read_a_run_take_its_model_and_refuse_another(run):
  """The one rule (config_lib.with_run_model): 4 heads instead of 2 leaves every parameter
  shape as it is (the integrity check cannot see it); eval, average and a resume refuse it in
  one line naming the keys and touch nothing. Without a config eval uses the run's own, with the
  same metrics; a dropout rate (training only) may differ."""
  config, workdir, _ = run
  other = config_lib.override(config, **{'model.num_heads': 4, 'model.pooling': 'mean_padded'})
  before = sorted(os.listdir(workdir)), open(os.path.join(workdir, 'config.json')).read()
  attempts = (lambda: evaluate(other, workdir, checkpoint='latest', split='validation'),
              lambda: average.average_checkpoints(workdir, config=other),
              lambda: train_and_evaluate(config_lib.override(other, num_train_steps=6), workdir))
  for attempt in attempts:
    with pytest.raises(config_lib.ModelMismatch) as error:
      attempt()
    message = str(error.value)
    assert message.startswith(f'--config describes another model than the run in {workdir} (its '
                              'config.json): model.num_heads 4 (run: 2), model.pooling '
                              '"mean_padded" (run: "mean"); '), message
    assert '\n' not in message
  assert (sorted(os.listdir(workdir)), open(os.path.join(workdir, 'config.json')).read()) == before
  own = evaluate(config, workdir, checkpoint='latest', split='validation')
  assert evaluate(None, workdir, checkpoint='latest', split='validation') == own
  dropout = config_lib.override(config, **{'model.dropout_rate': 0.5})
  assert evaluate(dropout, workdir, checkpoint='latest', split='validation') == own
  assert own['count'] == 20 and own['step'] == 4


def test_a_run_older_than_a_model_option_is_read_with_the_option_default(run):
  """A run whose config.json predates model options (here `activation` and
  `layer_norm_epsilon`, as runs made before they existed) trained with the module's defaults:
  a --config that sets those defaults is the run's model (eval gives the same metrics), one that
  sets another value is refused naming the default."""
  config, workdir, _ = run
  path = os.path.join(workdir, 'config.json')
  with open(path) as f:
    saved = json.load(f)
  assert saved['model']['activation'] == 'gelu' and saved['model']['layer_norm_epsilon'] == 1e-6
  own = evaluate(config, workdir, checkpoint='latest', split='validation')
  del saved['model']['activation'], saved['model']['layer_norm_epsilon']
  with open(path, 'w') as f:
    json.dump(saved, f)
  assert evaluate(config, workdir, checkpoint='latest', split='validation') == own
  relu = config_lib.override(config, **{'model.activation': 'relu'})
  with pytest.raises(config_lib.ModelMismatch,
                     match=r'config.json\): model.activation "relu" '
                           r'\(run: absent, i.e. "gelu"\); '):
    evaluate(relu, workdir, checkpoint='latest', split='validation')


def test_eval_of_a_damaged_best_checkpoint_names_the_file_in_one_line(run, data_dir):
  config, workdir, _ = run
  (best,) = os.listdir(os.path.join(workdir, 'best'))
  os.remove(os.path.join(workdir, 'best', best, 'state', '_METADATA'))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match=rf'checkpoint \S+/best/{best} is damaged '
                           r'\(state/_METADATA is missing\)'):
    evaluate(config, workdir, checkpoint='best', split='validation')
  overrides = [f'--config.{k}={v}' for k, v in tiny_overrides(data_dir, num_devices=1).items()]
  proc = subprocess.run(
      [sys.executable, 'eval.py', '--config', 'configs/lra_listops.py:tiny', '--workdir',
       workdir, '--checkpoint', 'best', *overrides], cwd=REPO, capture_output=True, text=True,
      timeout=300, env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert proc.returncode == 2
  lines = [l for l in proc.stderr.splitlines() if l.startswith('error:')]
  assert len(lines) == 1 and 'state/_METADATA is missing' in lines[0], proc.stderr[-2000:]
  assert 'Traceback' not in proc.stderr


def test_resume_after_damage_continues_exactly_and_rewrites_the_replayed_records(run, pristine):
  config, workdir, _ = run
  _flip_bit(os.path.join(workdir, 'checkpoints', '4'))
  first_record = read_metrics(workdir, 'train')[0]
  result = train_and_evaluate(config, workdir)
  assert result.status == 'finished' and result.step == 4
  train = read_metrics(workdir, 'train')
  assert [r['step'] for r in train] == [1, 2, 3, 4]                   # no duplicates
  assert train[0] == first_record                                      # not from scratch
  original = {r['step']: r['loss'] for r in read_metrics(pristine[1], 'train')}
  assert [train[2]['loss'], train[3]['loss']] == [original[3], original[4]]   # same replay
  assert [r['step'] for r in read_metrics(workdir, 'validation')] == [2, 4]


# -- the NaN guard ------------------------------------------------------------------------------
DIVERGING = {'optimizer.learning_rate': 1e30, 'optimizer.warmup_steps': 0,
             'optimizer.schedule': 'constant'}


def test_guard_keeps_the_previous_state_and_records_the_first_bad_step(data_dir):
  config = tiny_config(data_dir, num_devices=1, **DIVERGING)   # the next test's compiled step
  setup = make_setup(config)
  from poolformers_jax.trainer import setup as setup_lib
  state = setup_lib.create_train_state(setup, jax.random.PRNGKey(0))
  step_fn = step_lib.make_train_step(setup)
  it = data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size,
                                seed=config.seed)
  batches = [jax.device_put(next(it)) for _ in range(4)]
  acc = step_lib.new_accumulator(setup.mesh, step_lib.accumulator_shapes(setup))
  before = None
  for batch in batches:
    before = jax.device_get(state)
    state, acc = step_fn(state, acc, batch, jax.random.PRNGKey(1))
    if int(acc['first_bad_step']):
      break
  bad = int(acc['first_bad_step'])
  assert bad >= 2 and not np.isfinite(float(acc['bad_loss']))
  after = jax.device_get(state)
  # The rejected update left every array exactly as it was, and finite.
  jax.tree.map(np.testing.assert_array_equal, after, before)
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(after.params))
  assert float(acc['steps']) == bad - 1                  # the bad step is not in the sums


def test_guard_flag_sees_every_leaf_and_its_program_grows_linearly():
  """_all_finite is False when any one float leaf of hundreds holds a NaN or inf (integer leaves
  are not checked), and the guarded update compiles to a program linear in the leaf count (an
  and-reduction of the flags compiled to ~190 K HLO lines for 300 leaves: minutes on XLA:CPU)."""
  leaves = [jnp.full((3, 5), float(i)) for i in range(300)] + [jnp.arange(4)]
  check = jax.jit(step_lib._all_finite)
  assert bool(check(leaves))
  for index, bad in ((0, jnp.nan), (150, jnp.inf), (299, -jnp.inf)):
    damaged = list(leaves)
    damaged[index] = damaged[index].at[1, 2].set(bad)
    assert not bool(check(damaged)), (index, bad)

  def guarded(new, old):
    finite = step_lib._all_finite(new)
    return [jnp.where(finite, n, o) for n, o in zip(new, old)]
  hlo = jax.jit(guarded).lower(leaves, leaves).compile().as_text()
  assert len(hlo.splitlines()) < 40 * len(leaves), len(hlo.splitlines())


def test_fresh_run_that_diverges_names_the_step_and_that_nothing_was_saved(data_dir, tmp_path):
  config = tiny_config(data_dir, num_train_steps=6, checkpoint_every_steps=100,
                       eval_every_steps=100, log_every_steps=100, num_devices=1, **DIVERGING)
  with pytest.raises(NonFiniteLossError) as error:
    train_and_evaluate(config, str(tmp_path))
  message = str(error.value)
  assert ('at step 2: stopped without saving anything after step 1; no checkpoint was saved'
          in message)
  assert 'None' not in message and 'the data' in message and '\n' not in message
  assert not os.listdir(tmp_path / 'checkpoints')


def test_divergence_never_names_an_exploded_checkpoint_and_resume_replays_it_exactly(
    data_dir, tmp_path):
  """Warmup from lr 0 to 1e30: step 1 leaves the parameters as they were (~1), step 2 makes them
  finite but ~1e29, step 3 is NaN: the issue's steps 40 / 41 / 42. Checkpoint 2 (latest and best)
  is finite but not good; it is moved aside, the error names checkpoint 1, which evaluates to a
  finite loss. A resume (same config) replays step 2 bit for bit and stops the same way."""
  config = tiny_config(data_dir, num_train_steps=6, checkpoint_every_steps=1, eval_every_steps=1,
                       log_every_steps=100, num_devices=1, final_test=False,
                       **{**DIVERGING, 'optimizer.warmup_steps': 10})
  messages = []
  for _ in range(2):
    with pytest.raises(NonFiniteLossError) as error:
      train_and_evaluate(config, str(tmp_path))
    messages.append(str(error.value))
  assert messages[0].split('. Causes')[0] == messages[1].split('. Causes')[0]
  assert 'the checkpoint of step 1 this run resumed from' in messages[1] and '\n' not in messages[1]
  assert ('training loss is nan at step 3: stopped without saving anything after step 2; the last '
          f'good checkpoint is step 1 in {tmp_path}/checkpoints (checkpoint 2, saved right before '
          'the step that diverged, is not confirmed by a finite step after it: moved to '
          f'{tmp_path}/rejected)') in messages[0]
  assert sorted(os.listdir(tmp_path / 'checkpoints')) == ['1']
  rejected = sorted(os.listdir(tmp_path / 'rejected'))
  assert [n for n in rejected if 'checkpoints' in n] == ['diverged-checkpoints-2',
                                                         'diverged-checkpoints-2.1']
  # The exploded step 2 validated *better* (accuracy 0.2 against 0.1, loss NaN): it was the best
  # checkpoint, which eval.py --checkpoint best would have read; it is moved aside as well.
  assert 'diverged-best-2' in rejected and os.listdir(tmp_path / 'best') == []
  largest = lambda path: max(float(np.abs(x).max()) for x in
                             jax.tree.leaves(init_from.read_variables(str(path))['params']))
  assert largest(tmp_path / 'checkpoints' / '1') < 10 and largest(
      tmp_path / 'rejected' / 'diverged-checkpoints-2') > 1e20
  first, replayed = (init_from.read_variables(str(tmp_path / 'rejected' / name))['params']
                     for name in ('diverged-checkpoints-2', 'diverged-checkpoints-2.1'))
  jax.tree.map(np.testing.assert_array_equal, first, replayed)
  named = evaluate(None, str(tmp_path), checkpoint='latest', split='validation')
  assert named['step'] == 1 and np.isfinite(named['loss']) and named['loss'] < 10


# -- the hot path -------------------------------------------------------------------------------
def test_hot_path_steps_never_read_from_the_device_and_rates_and_profile_are_logged(
    data_dir, tmp_path):
  with DeviceReads() as reads:
    jax.device_get(jnp.ones(2) + 1)
  assert reads.read_after == {0}                          # the recorder does see a read
  # The pristine run's model and schedule (its compiled step is in the persistent cache).
  config = tiny_config(data_dir, **{**STEPS, 'log_every_steps': 3, 'eval_every_steps': 4,
                                    'checkpoint_every_steps': 4, 'profile_steps': (1, 2)})
  with DeviceReads() as reads:
    result = train_and_evaluate(config, str(tmp_path))
  assert result.status == 'finished'
  # Nothing is read between dispatching step 1 and step 2 (the hot path); the steps that sync
  # (2: profile end, 3: log, 4: end) do read.
  assert 1 not in reads.read_after and {2, 3, 4} <= reads.read_after
  train = read_metrics(str(tmp_path), 'train')
  assert [r['step'] for r in train] == [3, 4]
  for r in train:
    assert r['examples_per_second'] == pytest.approx(8 * r['steps_per_second'])
    assert r['tokens_per_second'] == pytest.approx(32 * r['examples_per_second'])
  assert train[0]['compile_seconds'] > 0 and 'compile_seconds' not in train[1]
  traces = [f for _, _, files in os.walk(tmp_path / 'profile') for f in files]
  assert any(f.endswith('.xplane.pb') for f in traces)
