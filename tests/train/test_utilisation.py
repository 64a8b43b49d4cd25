"""How a run uses the machine (trainer/utilisation.py, flops.py, writers.py): FLOP/s from XLA's
count and the measured rate, the data wait against a slow and a fast source, the parameter and
update norms of the step, the writers (a fake wandb, and the real one offline), the peaks and
the people's format."""
import contextlib
import glob
import importlib.util
import logging
import os
import re
import struct
import sys
import time
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_runs import tiny_config

from poolformers_jax import config as config_lib, data
from poolformers_jax.config.validate import ConfigError
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import flops, step as step_lib, utilisation, writers
from poolformers_jax.trainer.metrics import format_metrics, read_metrics
from poolformers_jax.trainer.setup import create_train_state, make_setup, param_count

MACHINE_USE = ('flops_per_second_per_device', 'data_wait_fraction', 'param_norm', 'update_norm')


class _Source:
  """The trainer's train iterator, its first `ahead` batches read into memory (next() then costs
  nothing) or each batch `delay` seconds late."""

  def __init__(self, iterator, *, ahead=0, delay=0.0):
    self.iterator, self.delay = iterator, delay
    self.ready = [next(iterator) for _ in range(ahead)]

  def __iter__(self):
    return self

  def __next__(self):
    if self.ready:
      return self.ready.pop(0)
    time.sleep(self.delay)
    return next(self.iterator)

  def get_state(self):
    return self.iterator.get_state()

  def set_state(self, state):
    self.iterator.set_state(state)


def _run_with_source(monkeypatch, config, workdir, **source):
  real = data.make_train_iterator
  monkeypatch.setattr(data, 'make_train_iterator',
                      lambda *a, **k: _Source(real(*a, **k), **source))
  return train_and_evaluate(config, workdir)


class _FakeWandb(types.ModuleType):
  """`wandb` as the writer calls it, recording the calls."""

  def __init__(self):
    super().__init__('wandb')
    self.calls = []

  def init(self, **kwargs):
    self.calls.append(('init', kwargs))
    calls = self.calls
    return types.SimpleNamespace(
        log=lambda values, step: calls.append(('log', step, values)),
        config=types.SimpleNamespace(update=lambda values, allow_val_change: calls.append(
            ('config', values))),
        finish=lambda: calls.append(('finish',)))


def _events(workdir):
  """{tag: {step: value}} of the scalars in DIR/tensorboard, and the tags of other summaries."""
  from tensorboardX.proto import event_pb2
  scalars, others = {}, set()
  for name in os.listdir(os.path.join(workdir, 'tensorboard')):
    with open(os.path.join(workdir, 'tensorboard', name), 'rb') as f:
      blob = f.read()
    at = 0
    while at < len(blob):
      (size,) = struct.unpack('<Q', blob[at:at + 8])
      event = event_pb2.Event.FromString(blob[at + 12:at + 12 + size])
      for value in event.summary.value:
        if value.HasField('simple_value'):
          scalars.setdefault(value.tag, {})[event.step] = value.simple_value
        else:
          others.add(value.tag)
      at += 16 + size
  return scalars, others


@pytest.fixture(scope='module')
def fast_run(data_dir, tmp_path_factory):
  """6 steps logged every 2 on 8 devices, the batches in memory, every writer (a fake wandb)."""
  workdir = str(tmp_path_factory.mktemp('fast'))
  config = tiny_config(data_dir, num_train_steps=6, log_every_steps=2, eval_every_steps=6,
                       checkpoint_every_steps=6, writers='tensorboard,wandb')
  fake = _FakeWandb()
  with pytest.MonkeyPatch.context() as patch:
    patch.setitem(sys.modules, 'wandb', fake)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    try:
      _run_with_source(patch, config, workdir, ahead=6)
    finally:
      logging.getLogger().removeHandler(handler)
  return config, workdir, fake.calls, [r.getMessage() for r in records]


def test_flops_per_second_is_xla_count_times_the_logged_rate(fast_run):
  config, workdir, _, _ = fast_run
  train = read_metrics(workdir, 'train')
  assert [r['step'] for r in train] == [2, 4, 6]
  setup = make_setup(config_lib.override(config, writers=''))   # the run's, without its wandb
  compiled = step_lib.make_train_step(setup).lower(*step_lib.abstract_step_args(setup)).compile()
  xla = compiled.cost_analysis()['flops']   # compiled again here: the same program, per device
  assert train[0]['xla_step_flops_per_device'] == xla > 0
  assert all('xla_step_flops_per_device' not in r for r in train[1:])   # logged once
  for record in train:
    assert record['flops_per_second_per_device'] == pytest.approx(
        xla * record['steps_per_second'], rel=1e-12)
    assert 'mfu' not in record and 'memory_bytes_in_use' not in record   # a CPU: no peak, stats
  devices = setup.mesh.devices.size
  params = param_count(setup.abstract_state.params)
  assert train[0]['model_6nd_step_flops_per_device'] == 6 * params * 32 * 8 / devices
  # XLA counts every dot of forward and backward (2 FLOPs a MAC) and more: at least the model's.
  assert 0 < train[0]['model_step_flops_per_device'] <= xla
  assert train[0]['compiled_memory_bytes'] == step_lib.memory_of(compiled)['total']
  # What two runs of the same steps share: all but the machine's keys (a resume's test compares).
  assert set(train[0]) - set(utilisation.MACHINE_KEYS) == {
      'step', 'split', 'loss', 'accuracy', 'accuracy_top5', 'grad_norm', 'update_norm',
      'param_norm', 'learning_rate'}


def test_fast_source_waits_little_and_tensorboard_has_the_same_values(fast_run):
  _, workdir, _, messages = fast_run
  train = read_metrics(workdir, 'train')
  assert all(0 <= r['data_wait_fraction'] < 0.05 for r in train)
  assert not [m for m in messages if 'data_wait_fraction' in m]
  scalars, others = _events(workdir)
  for name in MACHINE_USE:
    logged = {r['step']: r[name] for r in train}
    assert scalars[f'train/{name}'] == pytest.approx(logged, rel=1e-6)   # float32 events
  assert all(r['param_norm'] > 0 and r['update_norm'] > 0 for r in train)
  assert '_hparams_/experiment' in others and '_hparams_/session_start_info' in others


def test_wandb_gets_the_config_once_and_every_record(fast_run):
  config, workdir, calls, _ = fast_run
  kinds = [call[0] for call in calls]
  assert kinds[:2] == ['init', 'config'] and kinds[-1] == 'finish' and kinds.count('config') == 1
  assert calls[0][1]['dir'] == os.path.abspath(workdir)
  assert calls[1][1]['batch_size'] == 8 and calls[1][1]['optimizer.learning_rate'] == 3e-3
  logged = {(step, key): value for kind, *rest in calls if kind == 'log'
            for step, values in [rest] for key, value in values.items()}
  for record in read_metrics(workdir, 'train'):
    for name in MACHINE_USE:
      assert logged[(record['step'], f'train/{name}')] == record[name]
  assert all(isinstance(v, (int, float)) for v in logged.values())   # numbers only


def test_wandb_offline_run_holds_the_config_and_every_record(data_dir, tmp_path, monkeypatch):
  """The real wandb in its offline mode (no network): its run file holds each record's values as
  wandb's JSON and the config's hyperparameters."""
  pytest.importorskip('wandb', reason='wandb is in requirements-test.txt; pip install wandb')
  monkeypatch.setenv('WANDB_MODE', 'offline')
  monkeypatch.setenv('WANDB_SILENT', 'true')
  workdir = str(tmp_path)
  config = tiny_config(data_dir, num_train_steps=4, log_every_steps=2, eval_every_steps=4,
                       checkpoint_every_steps=4, final_test=False, writers='wandb')
  _run_with_source(monkeypatch, config, workdir, ahead=4)
  runs = glob.glob(os.path.join(workdir, 'wandb', 'offline-run-*', 'run-*.wandb'))
  assert len(runs) == 1, runs
  with open(runs[0], 'rb') as f:
    stored = f.read()   # wandb's records: protobuf items, a key and its value as JSON (field 16)
  values: dict[str, set[float]] = {}   # config items name their key in field 1, history's in 2
  for item in re.finditer(rb'[\x0a\x12]([\x01-\x7f])([\w./]+)\x82\x01([\x01-\x7f])', stored):
    if len(item.group(2)) == item.group(1)[0]:
      text = stored[item.end():item.end() + item.group(3)[0]]
      with contextlib.suppress(ValueError):
        values.setdefault(item.group(2).decode(), set()).add(float(text))
  train = read_metrics(workdir, 'train')
  assert [r['step'] for r in train] == [2, 4]
  for record in train:
    for name in ('loss', *MACHINE_USE):
      assert float(record[name]) in values[f'train/{name}'], (name, record[name], values)
  assert values['optimizer.learning_rate'] == {3e-3} and values['batch_size'] == {8.0}
  assert not os.path.exists(os.path.join(workdir, 'tensorboard'))   # writers='wandb' alone


def test_slow_source_raises_the_wait_past_the_threshold_and_warns_once(data_dir, tmp_path,
                                                                      monkeypatch, caplog):
  config = tiny_config(data_dir, num_train_steps=4, log_every_steps=2, eval_every_steps=4,
                       checkpoint_every_steps=4, final_test=False, writers='')
  with caplog.at_level(logging.WARNING):
    _run_with_source(monkeypatch, config, str(tmp_path), delay=0.2)
  train = read_metrics(str(tmp_path), 'train')
  assert [r['step'] for r in train] == [2, 4]
  assert all(r['data_wait_fraction'] > utilisation.DATA_WAIT_WARNING for r in train)
  warned = [r.getMessage() for r in caplog.records if 'data_wait_fraction' in r.getMessage()]
  assert len(warned) == 1 and 'config.data.worker_count' in warned[0]
  assert 'at step 4' in warned[0]   # the first window (readers starting) never warns
  assert not os.path.exists(os.path.join(str(tmp_path), 'tensorboard'))   # writers=''


def test_param_and_update_norms_of_a_step_against_the_states(data_dir):
  config = tiny_config(data_dir, num_devices=1)
  setup = make_setup(config, need_files=False)
  compiled = step_lib.compile_train_step(setup)
  state = create_train_state(setup, jax.random.PRNGKey(0))
  before = jax.tree.map(np.asarray, jax.device_get(state.params))
  rng = np.random.default_rng(0)
  spec = step_lib.batch_spec(setup)
  batch = {'inputs': rng.integers(1, setup.info.vocab_size, spec['inputs'].shape).astype(np.int32),
           'targets': rng.integers(0, setup.info.num_classes, spec['targets'].shape).astype(
               np.int32)}
  state, acc = compiled.run(state, compiled.new_accumulator(setup.mesh), compiled.put(batch),
                            jax.random.PRNGKey(1))
  after = jax.tree.map(np.asarray, jax.device_get(state.params))
  norm = lambda tree: np.sqrt(sum(np.sum(np.square(x, dtype=np.float64))
                                  for x in jax.tree.leaves(tree)))
  assert float(acc['param_norm']) == pytest.approx(norm(after), rel=1e-5)
  change = jax.tree.map(lambda a, b: a.astype(np.float64) - b, after, before)
  assert float(acc['update_norm']) == pytest.approx(norm(change), rel=1e-4)
  assert norm(change) > 0


class _Dense(nn.Module):
  @nn.compact
  def __call__(self, x, deterministic=True):
    return nn.Dense(5)(x)


def test_model_flops_of_a_dense_layer_are_six_times_its_macs():
  model = _Dense()
  x = jax.ShapeDtypeStruct((1, 7, 3), jnp.float32)
  variables = flops.abstract_variables(model, x)
  counts = flops.model_flops(model, x, variables, batch_size=4, num_params=20,
                             tokens_per_example=7)
  assert counts == {'model_step_flops': 6.0 * (7 * 3 * 5) * 4,       # 6 x MACs x examples
                    'model_6nd_step_flops': 6.0 * 20 * 7 * 4}        # 6 x N x tokens


def test_peaks_by_device_and_dtype_and_no_mfu_without_one():
  assert flops.peak_flops('NVIDIA H100 80GB HBM3', 'bfloat16') == 989e12
  assert flops.peak_flops('NVIDIA H100 80GB HBM3', 'float32') == 989e12 / 2   # TF32
  assert flops.peak_flops('NVIDIA H200', 'bfloat16') == 989e12
  assert flops.peak_flops('TPU v5 lite', 'float32') == 197e12   # bf16 passes
  assert flops.peak_flops('cpu', 'bfloat16') is None
  assert utilisation.rates(10.0, 2e9, None) == {'flops_per_second_per_device': 2e10}
  assert utilisation.rates(10.0, 2e9, 4e10) == {'flops_per_second_per_device': 2e10, 'mfu': 0.5}
  assert utilisation.rates(10.0, None, 4e10) == {}


def test_device_memory_where_the_backend_keeps_it(monkeypatch):
  assert utilisation.device_memory() == {}   # CPU: memory_stats() is None
  fake = [types.SimpleNamespace(memory_stats=lambda n=n: {'bytes_in_use': n,
                                                         'peak_bytes_in_use': 3 * n})
          for n in (5, 7)]
  monkeypatch.setattr(jax, 'local_devices', lambda: fake)
  assert utilisation.device_memory() == {'memory_bytes_in_use': 7,
                                         'memory_peak_bytes_in_use': 21}


def test_writer_names_are_checked_in_one_line(data_dir, monkeypatch):
  config = tiny_config(data_dir)
  with pytest.raises(ConfigError, match=r"names 'tensorbord', which is not a writer; choose "
                     r'from tensorboard, wandb') as error:
    make_setup(config_lib.override(config, writers='tensorbord'), need_files=False)
  assert '\n' not in str(error.value)
  monkeypatch.delitem(sys.modules, 'wandb', raising=False)
  find_spec = importlib.util.find_spec   # wandb is not installed, whatever this machine has
  monkeypatch.setattr(importlib.util, 'find_spec',
                      lambda name, *a: None if name == 'wandb' else find_spec(name, *a))
  with pytest.raises(ConfigError, match="'wandb' but wandb is not installed; pip install wandb"):
    make_setup(config_lib.override(config, writers='tensorboard,wandb'), need_files=False)
  assert writers.names_of(' tensorboard, wandb,') == ['tensorboard', 'wandb']


def test_people_read_rounded_numbers():
  metrics = {'loss': np.float64(2.29612345), 'accuracy': np.float32(0.1875), 'count': 20,
             'checkpoint': 'best'}
  assert format_metrics(metrics) == 'loss 2.296, accuracy 0.1875, count 20, checkpoint best'
  assert format_metrics(None) == 'none'
