"""What the programs share: the --config flag with close-key suggestions and the config resolver
(`--config lra_listops:ponet` reads the shipped config), the multi-process flags (`define_flags`:
importing this module defines no flag), and `start`, the last line of every program's `main`
(process settings, logs, multi-process start and end, and the error contract of
`poolformers_jax.errors` around the program's work)."""
from __future__ import annotations

import ast
import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence

from absl import app, flags, logging as absl_logging

from poolformers_jax import config as config_lib, errors, runtime
from poolformers_jax.trainer import host_memory, sharding


def define_flags() -> None:
  """The flags every absl program shares: --verbose_errors and the multi-process ones."""
  if 'distributed' in flags.FLAGS:
    return
  flags.DEFINE_bool('verbose_errors', False,
                    'Show the traceback of an error instead of its one line.')
  flags.DEFINE_enum(
      'distributed', 'auto', list(sharding.DISTRIBUTED_MODES),
      'Multi-process run: auto = when the flags below / JAX_* variables are set or jax detects a '
      'cluster (SLURM, Open MPI, Cloud TPU, Kubernetes); on = always; off = one process.')
  flags.DEFINE_string('coordinator_address', None, 'host:port of process 0.')
  flags.DEFINE_integer('num_processes', None, 'Number of processes.')
  flags.DEFINE_integer('process_id', None, 'This process, 0..num_processes-1.')


def define_trust_imports_flag() -> None:
  """--trust_imports, of the programs that read a run directory without a --config."""
  flags.DEFINE_bool('trust_imports', False, "Import the modules the run's config.json names "
                    '(config.imports): a run directory runs no code unless this is given or the '
                    "command's own --config names them.")


# --config.<...>_kwargs.<key>=<value> overrides (model.mixer_kwargs.segment_num), which may add a
# key config_flags cannot add to the locked config: parse_flags takes them out of argv,
# config_value applies them (checked, as config.override).
_OPEN_OVERRIDES: dict[str, dict[str, object]] = {}


def literal(text: str) -> object:
  """A flag's or --set's value: a Python literal, else the text itself."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text   # a bare word: a string


def _take_open_overrides(argv: Sequence[str], flag_name: str = 'config'):
  """argv without its --config.<...>_kwargs.<key> overrides, and those as {key: value}."""
  rest, taken, i, prefix = [], {}, 0, f'--{flag_name}.'
  while i < len(argv):
    key, eq, value = argv[i][len(prefix):].partition('=')
    if argv[i].startswith(prefix) and config_lib.is_open_key(key) and (eq or i + 1 < len(argv)):
      if not eq:
        i, value = i + 1, argv[i + 1]
      taken[key] = literal(value)
    else:
      rest.append(argv[i])
    i += 1
  return rest, taken


def define_config_flag(argv: Sequence[str] | None) -> None:
  """The programs' --config (ml_collections' config_flags, locked). config_flags defines a flag
  for every --config.<key> of argv it is given: not for the *_kwargs ones (config_value adds
  them)."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  argv = list(sys.argv if argv is None else argv)
  config_flags.DEFINE_config_file('config', None, 'configs/<task>.py[:words], or <task>:words '
                                  'for a shipped config', lock_config=True,
                                  sys_argv=_take_open_overrides(argv)[0])


def config_value(holder):
  """The --config value; config_flags loads the file at first use and fails with an OSError."""
  try:
    config = holder.value
    if config is not None:   # an optional --config left out
      config.keys()   # a lazy stand-in until touched
      if _OPEN_OVERRIDES.get(holder.name):
        config = config_lib.override(config, **_OPEN_OVERRIDES[holder.name])
    return config
  except OSError as error:
    cause = error.__cause__ or error.__context__ or error
    raise ValueError(f'cannot load the --config file: {errors.one_line(str(cause))}; check its '
                     'path (e.g. configs/lra_listops.py)') from None


def _config_spec(argv: Sequence[str]) -> str | None:
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      return arg.split('=', 1)[1]
    if arg == '--config' and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _resolve_config(argv: Sequence[str]) -> list[str]:
  """argv with --config's file resolved (config.resolve: a path, else a shipped config)."""
  argv = list(argv)
  for i, arg in enumerate(argv):
    if arg.startswith('--config='):
      argv[i] = '--config=' + config_lib.resolved(arg.split('=', 1)[1])
    elif arg == '--config' and i + 1 < len(argv):
      argv[i + 1] = config_lib.resolved(argv[i + 1])
  return argv


def parse_flags(argv: Sequence[str]) -> list[str]:
  """absl flag parsing under the error contract: --config resolved as `config.load` resolves it,
  a misspelled --config.key names close valid keys, a bad flag value or an unknown flag says so,
  a stray positional argument (often a space for the colon of --config FILE.py:WORDS) says how to
  write it."""
  try:
    resolved = _resolve_config(argv)
  except FileNotFoundError as error:
    errors.fail(f'--config: {error}', 2)
  resolved, _OPEN_OVERRIDES['config'] = _take_open_overrides(resolved)
  if _OPEN_OVERRIDES['config'] and _config_spec(argv) is None:
    key = next(iter(_OPEN_OVERRIDES['config']))
    errors.fail(f'--config.{key} overrides a config file: give --config too', 2)
  try:
    rest = flags.FLAGS(resolved)
  except Exception as error:  # config_flags raises a bare AttributeError for unknown keys
    spec = _config_spec(argv)
    keys = config_lib.override_keys_from_argv(argv)
    if spec and keys:
      try:
        config_lib.check_keys(config_lib.load_file(spec), keys)
      except config_lib.ConfigKeyError as key_error:
        errors.fail(str(key_error), 2)
      except Exception as config_error:  # pylint: disable=broad-except  (the config file itself)
        errors.fail(f'{spec}: {type(config_error).__name__}: {config_error}', 2)
    if keys and spec is None:
      errors.fail(f'--config.{keys[0]} overrides a config file: give --config too (for a run, '
                  'the file and words it was trained with, e.g. --config '
                  'configs/lra_listops.py:ponet)', 2)
    if isinstance(error, (flags.Error, ValueError)):
      errors.fail(f'{errors.one_line(str(error)).removeprefix("ValueError: ").rstrip(".")}; '
                  'see --helpfull for the flags', 2)
    raise
  if len(rest) > 1:
    errors.fail(_stray_arguments(argv, rest[1:]), 2)
  return rest


def _stray_arguments(argv: Sequence[str], stray: Sequence[str]) -> str:
  spec, argv = _config_spec(argv), list(argv)
  at = next((i for i, arg in enumerate(argv) if arg in (spec, f'--config={spec}')), len(argv))
  follows = argv[at + 1:at + 2] == [stray[0]]   # --config FILE WORD, or --config=FILE WORD
  if spec is not None and follows and ':' not in spec:
    return (f'unexpected argument {stray[0]!r} after --config {spec}: the words go after a colon, '
            f'without a space: --config {spec}:{stray[0]}')
  return (f'unexpected arguments {list(stray)}: every option is a flag (--name=value); '
          'see --helpfull for the flags')


class _LibraryInfoFilter(logging.Filter):
  """Drops INFO chatter of orbax / grain / tfds (one line per checkpoint phase) and of jax's
  backend probing (jax 0.8 logs "Unable to initialize backend 'tpu'" where libtpu is absent)
  from the console, orbax's warnings that a read-only manager (eval.py) is read-only, and the
  tracebacks orbax's writer threads (and asyncio, of their tasks) log of a full disk: the
  program's error says it (errors.DiskFull)."""
  NOISY = (os.sep + 'orbax' + os.sep, os.sep + 'grain' + os.sep,
           os.sep + 'tensorflow_datasets' + os.sep, os.sep + 'xla_bridge.py')
  EXPECTED = ('CheckpointManagerOptions.read_only=True', 'Given directory is read only')

  def filter(self, record: logging.LogRecord) -> bool:
    if any(record.getMessage().startswith(e) for e in self.EXPECTED):
      return False
    noisy = any(n in record.pathname for n in self.NOISY)
    if (noisy or record.name == 'asyncio') and (
        errors.is_disk_full(Exception(record.getMessage())) or
        (record.exc_info and errors.is_disk_full(record.exc_info[1]))):
      return False
    return record.levelno >= logging.WARNING or not noisy


def quiet_library_logs() -> None:
  quiet = _LibraryInfoFilter()
  # jax < 0.9 also prints its records through a handler of its own on the 'jax' logger.
  for handler in [absl_logging.get_absl_handler(), *logging.getLogger('jax').handlers]:
    handler.addFilter(quiet)


def _run_program(work: Callable[[], None], argv: Sequence[str]) -> None:
  """`work()` between the multi-process start and end, under the error contract (parse_flags
  refused stray arguments: `argv` is the program's name only)."""
  del argv
  with errors.reported_in_one_line():
    quiet_library_logs()
    host_memory.keep_freed_memory()   # before XLA and the data threads allocate (its docstring)
    sharding.maybe_initialize_distributed(flags.FLAGS.distributed,
                                          flags.FLAGS.coordinator_address,
                                          flags.FLAGS.num_processes, flags.FLAGS.process_id)
    work()
    sharding.shutdown_distributed()


def start(module_name: str, work: Callable[[], None], argv: Sequence[str] | None,
          required: Sequence[str]) -> None:
  """The end of every program's `main`, after it defined its flags (in `main`, so importing a
  program defines none): `required` flags, the program's key flags, the process settings
  (runtime.configure_program), then `work()` inside `_run_program`."""
  flags.mark_flags_as_required(list(required))
  # --help lists the key flags of sys.argv[0], the script run (e.g. train.py): the program's own
  # and --config.
  own = flags.FLAGS.get_key_flags_for_module(module_name)
  for flag in own + ([flags.FLAGS['config']] if 'config' in flags.FLAGS else []):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  runtime.configure_program()
  app.run(functools.partial(_run_program, work), argv=None if argv is None else list(argv),
          flags_parser=parse_flags)
