"""Helpers for the trainer tests (imported by name: a module called conftest would collide with
tests/data/conftest.py): tiny ListOps configs on a session-wide generated dataset.

The persistent compilation cache lets the many short runs of the same tiny model reuse XLA
executables across tests (it changes no numbers). Each pytest-xdist worker has its own cache
folder: jax writes an entry without a lock, and a worker reading an entry that the other is still
writing deserializes a truncated executable, which aborts the process.
"""
import contextlib
import dataclasses
import os
import signal
import sys

import jax

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'configs'))

import lra_listops  # noqa: E402

from poolformers_jax import config as config_lib, data  # noqa: E402

_WORKER = os.environ.get('PYTEST_XDIST_WORKER', 'main')
jax.config.update('jax_compilation_cache_dir', os.path.join(REPO, '.pytest_cache', 'jax_cache',
                                                            _WORKER))
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)
jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)


def tiny_overrides(data_dir: str, **updates) -> dict:
  """A seconds-long ListOps run: 16-wide 1-layer model, 32-token trees, 8-example batches."""
  base = {
      'data.data_dir': data_dir,
      'data.generator.num_train': 64, 'data.generator.num_validation': 20,
      'data.generator.num_test': 20, 'data.generator.min_tokens': 5,
      'data.generator.max_tokens': 30, 'data.max_length': 32,
      'model.dim': 16, 'model.mlp_dim': 16, 'model.head_hidden_dim': 16, 'model.num_layers': 1,
      'batch_size': 8, 'eval_batch_size': 8, 'num_train_steps': 3,
      'optimizer.learning_rate': 3e-3, 'optimizer.warmup_steps': 1,
      'log_every_steps': 1, 'eval_every_steps': 3, 'checkpoint_every_steps': 3,
      'progress_bar': False,
  }
  base.update(updates)
  return base


def tiny_config(data_dir: str, family: str = 'transformer', **updates):
  return config_lib.override(lra_listops.get_config(f'{family},tiny'),
                               **tiny_overrides(data_dir, **updates))


class _SigtermAt:
  """Wraps the real train iterator; sends SIGTERM to this process when batch `at` is read."""

  def __init__(self, iterator, at):
    self.iterator, self.at, self.count = iterator, at, 0

  def __iter__(self):
    return self

  def __next__(self):
    self.count += 1
    if self.count == self.at:
      os.kill(os.getpid(), signal.SIGTERM)
    return next(self.iterator)

  def get_state(self):
    return self.iterator.get_state()

  def set_state(self, state):
    self.iterator.set_state(state)


@contextlib.contextmanager
def sigterm_at_step(step: int):
  """Inside: the trainer's train iterator sends this process SIGTERM as it reads the batch of
  `step` (>= 2: the loop's handler is set by then), so the loop stops after `step` as a
  preempted job does (checkpoint saved, status 'preempted')."""
  real = data.make_train_iterator
  data.make_train_iterator = lambda *a, **k: _SigtermAt(real(*a, **k), at=step)
  try:
    yield
  finally:
    data.make_train_iterator = real


class DeviceReads:
  """Inside: every host read of a jax.Array's value (device_get, float(), np.asarray: all go
  through ArrayImpl._value; jax's transfer guard does not fire on CPU arrays) is recorded with
  the number of train steps the trainer had dispatched by then (its compiled step counted):
  `read_after` holds those numbers."""

  def __init__(self):
    self.dispatched = 0
    self.read_after: set[int] = set()

  def __enter__(self):
    from jax._src import array

    from poolformers_jax.trainer import step as step_lib
    self._value, self._compile = array.ArrayImpl._value, step_lib.compile_train_step

    def recorded(value):
      self.read_after.add(self.dispatched)
      return self._value.fget(value)

    def compile_counted(parts):
      compiled = self._compile(parts)

      def counted(*args):
        self.dispatched += 1
        return compiled.run(*args)
      return dataclasses.replace(compiled, run=counted)

    array.ArrayImpl._value = property(recorded)
    step_lib.compile_train_step = compile_counted
    return self

  def __exit__(self, *exc):
    from jax._src import array

    from poolformers_jax.trainer import step as step_lib
    array.ArrayImpl._value, step_lib.compile_train_step = self._value, self._compile
