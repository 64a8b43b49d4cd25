"""The error contract of every command-line entry point (train.py, eval.py, the programs, the
benchmarks): bad input ends as one stderr line, before anything is compiled, with exit code 2

    error: <what is wrong>; <what to do>

and a diverged run (non-finite loss) likewise with exit code 1; `--verbose_errors` shows the
traceback instead. The standard library only (absl when a program runs), so a tool fails before it
imports jax; importing it defines no absl flag (the programs call `define_flags`). absl mains run
inside `reported_in_one_line` (`cli.start`); argparse mains use `ArgumentParser` and
`one_line_errors`.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from typing import Callable, Iterator, NoReturn


class ConfigKeyError(KeyError):
  """An unknown or misspelled config key; the message lists close valid keys."""

  def __str__(self) -> str:  # KeyError would quote the message
    return str(self.args[0])


# Problems of the input (flags, config, data, checkpoint, files): exit code 2 (and absl's
# flags.Error in an absl program).
INPUT_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
                IsADirectoryError, ConfigKeyError)
VERBOSE_FLAG = '--verbose_errors'


def _absl_flags():
  """absl's flags module when absl is imported (a program runs), else None."""
  return sys.modules.get('absl.flags')


def define_flags() -> None:
  """Defines --verbose_errors for an absl program (once per process)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  if 'verbose_errors' not in flags.FLAGS:
    flags.DEFINE_bool('verbose_errors', False,
                      'Show the traceback of an error instead of its one line.')


def one_line(message: str) -> str:
  """A message as one line; one that embeds a traceback (config_flags does) -> its last line."""
  lines = [line.strip() for line in str(message).splitlines() if line.strip()]
  if len(lines) > 1 and ('Traceback (most recent call last)' in message or '[Errno' in lines[-1]):
    return lines[-1]
  return ' '.join(' '.join(lines).split())


def fail(message: str, code: int = 2) -> NoReturn:
  """Prints `error: <message>` as one stderr line and exits with `code`."""
  sys.stdout.flush()
  sys.stderr.write('error: ' + one_line(message) + '\n')
  sys.stderr.flush()
  sys.exit(code)


def verbose() -> bool:
  """Whether --verbose_errors was given (absl flag, or an argparse tool's argument)."""
  flags = _absl_flags()
  if (flags is not None and flags.FLAGS.is_parsed() and 'verbose_errors' in flags.FLAGS
      and flags.FLAGS.verbose_errors):
    return True
  return VERBOSE_FLAG in sys.argv[1:]


@contextlib.contextmanager
def reported_in_one_line() -> Iterator[None]:
  """Input errors raised inside -> one stderr line + exit 2; a diverged run -> exit 1."""
  flags = _absl_flags()
  flag_errors = (flags.Error,) if flags is not None else ()
  try:
    yield
  except (*INPUT_ERRORS, *flag_errors, FloatingPointError) as error:
    if verbose():
      raise
    message = str(error)
    if isinstance(error, flag_errors):  # --config files load lazily, at first use
      message = f'{one_line(message)}; check the --config file and its argument'
    fail(message, 1 if isinstance(error, FloatingPointError) else 2)


def one_line_errors(main: Callable[..., object]) -> Callable[..., object]:
  """A main wrapped in `reported_in_one_line`."""

  @functools.wraps(main)
  def wrapped(*args, **kwargs):
    with reported_in_one_line():
      return main(*args, **kwargs)

  return wrapped


class ArgumentParser(argparse.ArgumentParser):
  """argparse with the contract: a bad argument is one `error:` line naming --help, exit 2
  (argparse's own error prints the usage block first)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.add_argument(VERBOSE_FLAG, action='store_true',
                      help='show the traceback of an error instead of its one line')

  def error(self, message: str) -> NoReturn:
    fail(f'{message}; see {self.prog} --help')
