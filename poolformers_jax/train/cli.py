"""What train.py and eval.py share: the --config flag parser with close-key suggestions, the
multi-process flags, `run` (logs, multi-process start and end around the work) and the one-line
error report: a bad config, dataset or checkpoint ends as ONE stderr line,
`error: <what is wrong>; <what to do>`, with exit code 2 (`--verbose_errors` for a traceback)."""
from __future__ import annotations

import importlib.util
import logging
import os
import functools
import sys
from typing import Callable, Sequence

from absl import app, flags
from absl import logging as absl_logging

from poolformers_jax.train import config_utils, host_memory, sharding

_DISTRIBUTED = flags.DEFINE_enum(
    'distributed', 'auto', list(sharding.DISTRIBUTED_MODES),
    'Multi-process run: auto = when the flags below / JAX_* variables are set or jax detects a '
    'cluster (SLURM, Open MPI, Cloud TPU, Kubernetes); on = always; off = one process.')
_COORDINATOR = flags.DEFINE_string('coordinator_address', None, 'host:port of process 0.')
_NUM_PROCESSES = flags.DEFINE_integer('num_processes', None, 'Number of processes.')
_PROCESS_ID = flags.DEFINE_integer('process_id', None, 'This process, 0..num_processes-1.')

VERBOSE_ERRORS = flags.DEFINE_bool('verbose_errors', False,
                                   'Show the traceback of an error instead of its one line.')
# Problems of the input (config, data, checkpoint): exit code 2. NonFiniteLossError (a
# FloatingPointError) is a failure of the run: one line too, exit code 1.
INPUT_ERRORS = (ValueError, FileNotFoundError, config_utils.ConfigKeyError)


def _one_line(message: str) -> str:
  """A message as one line; one that embeds a traceback (config_flags does) -> its last line."""
  lines = [line.strip() for line in str(message).splitlines() if line.strip()]
  if len(lines) > 1 and ('Traceback (most recent call last)' in message or '[Errno' in lines[-1]):
    return lines[-1]
  return ' '.join(' '.join(lines).split())


def _fail(message: str, code: int) -> None:
  sys.stderr.write('error: ' + _one_line(message) + '\n')
  sys.stderr.flush()
  sys.exit(code)


def config_value(holder):
  """The --config value; config_flags loads the file at first use and fails with an OSError."""
  try:
    config = holder.value
    config.keys()     # a lazy stand-in until touched
    return config
  except OSError as error:
    cause = error.__cause__ or error.__context__ or error
    raise ValueError(f'cannot load the --config file: {_one_line(str(cause))}; check its path '
                     '(e.g. configs/lra_listops.py)') from None


def one_line_errors(main: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
  """Wraps an absl main: input errors -> one stderr line + exit 2; a diverged run -> exit 1."""

  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except (*INPUT_ERRORS, flags.Error, FloatingPointError) as error:
      if flags.FLAGS.is_parsed() and VERBOSE_ERRORS.value:
        raise
      message = str(error)
      if isinstance(error, flags.Error):  # --config files load lazily, at first use
        message = f'{_one_line(message)}; check the --config file and its argument'
      _fail(message, 1 if isinstance(error, FloatingPointError) else 2)

  return wrapped


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
        _fail(str(key_error), 2)
      except Exception as config_error:  # pylint: disable=broad-except  (the config file itself)
        _fail(f'{spec}: {type(config_error).__name__}: {config_error}', 2)
    if isinstance(error, (flags.Error, ValueError)):
      _fail(f'{_one_line(str(error))}; see --helpfull for the flags', 2)
    raise


class _LibraryInfoFilter(logging.Filter):
  """Drops INFO chatter of orbax / grain / tfds (one line per checkpoint phase) from the console,
  and orbax's warnings that a read-only manager (eval.py) is read-only."""
  NOISY = (os.sep + 'orbax' + os.sep, os.sep + 'grain' + os.sep, os.sep + 'tensorflow_datasets' + os.sep)
  EXPECTED = ('CheckpointManagerOptions.read_only=True', 'Given directory is read only')

  def filter(self, record: logging.LogRecord) -> bool:
    if any(record.getMessage().startswith(e) for e in self.EXPECTED):
      return False
    return record.levelno >= logging.WARNING or not any(n in record.pathname for n in self.NOISY)


def quiet_library_logs() -> None:
  absl_logging.get_absl_handler().addFilter(_LibraryInfoFilter())


def run(argv: Sequence[str], work: Callable[[], None]) -> None:
  """The main() of train.py and eval.py: `work()` between the multi-process start and end."""
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  quiet_library_logs()
  host_memory.keep_freed_memory()   # before XLA and the data threads allocate (see its docstring)
  sharding.maybe_initialize_distributed(_DISTRIBUTED.value, _COORDINATOR.value,
                                        _NUM_PROCESSES.value, _PROCESS_ID.value)
  work()
  sharding.shutdown_distributed()
