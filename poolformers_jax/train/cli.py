"""What train.py and eval.py share: the --config flag parser with close-key suggestions, the
multi-process flags, and `run`: logs, multi-process start and end around the work."""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
from typing import Callable, Sequence

from absl import app, flags
from absl import logging as absl_logging

from poolformers_jax.train import config_utils, sharding

_DISTRIBUTED = flags.DEFINE_enum(
    'distributed', 'auto', list(sharding.DISTRIBUTED_MODES),
    'Multi-process run: auto = when the flags below / JAX_* variables are set or jax detects a '
    'cluster (SLURM, Open MPI, Cloud TPU, Kubernetes); on = always; off = one process.')
_COORDINATOR = flags.DEFINE_string('coordinator_address', None, 'host:port of process 0.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'Number of processes.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'This process, 0..num_processes-1.')


def load_config_file(spec: str):
  """'configs/lra_listops.py:ponet,small' -> the config, as ml_collections' config_flags does."""
  path, _, arg = spec.partition('.py:')
  path = path if path.endswith('.py') else path + '.py'
  module_spec = importlib.util.spec_from_file_location('_config_module', path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def _config_spec(argv: Sequence[str]) -> str | None:
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      return arg.split('=', 1)[1]
    if arg == '--config' and i + 1 < len(argv):
      return argv[i + 1]
  return None


def parse_flags(argv: Sequence[str]) -> list[str]:
  """absl flag parsing; a misspelled --config.key exits with one line naming close valid keys."""
  try:
    return flags.FLAGS(argv)
  except Exception as error:  # config_flags raises a bare AttributeError for unknown keys
    spec = _config_spec(argv)
    keys = config_utils.override_keys_from_argv(argv)
    if spec and keys and os.path.exists(spec.partition('.py:')[0].removesuffix('.py') + '.py'):
      try:
        config_utils.check_keys(load_config_file(spec), keys)
      except config_utils.ConfigKeyError as key_error:
        sys.stderr.write(f'FATAL Flags parsing error: {key_error}\n')
        sys.exit(2)
    if isinstance(error, flags.Error):
      sys.stderr.write(f'FATAL Flags parsing error: {error}\n')
      sys.exit(2)
    raise


class _LibraryInfoFilter(logging.Filter):
  """Drops INFO chatter of orbax / grain / tfds (one line per checkpoint phase) from the console."""
  NOISY = (os.sep + 'orbax' + os.sep, os.sep + 'grain' + os.sep, os.sep + 'tensorflow_datasets' + os.sep)

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or not any(n in record.pathname for n in self.NOISY)


def quiet_library_logs() -> None:
  absl_logging.get_absl_handler().addFilter(_LibraryInfoFilter())


def run(argv: Sequence[str], work: Callable[[], None]) -> None:
  """The main() of train.py and eval.py: `work()` between the multi-process start and end."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  quiet_library_logs()
  sharding.maybe_initialize_distributed(_DISTRIBUTED.value, _COORDINATOR.value,
                                        _NUM_PROCESSES.value, _PROCESS_ID.value)
  work()
  sharding.shutdown_distributed()
