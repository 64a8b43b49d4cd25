"""The error contract of every command-line entry point (train.py, eval.py, the programs, the
benchmarks): bad input ends as one stderr line, before anything is compiled, with exit code 2

    error: <what is wrong>; <what to do>

and a diverged run (non-finite loss) likewise with exit code 1; a fault of the machine
(`MachineFault`: a full disk, a lost process, a step larger than the memory, a damaged data file;
docs/training.md, "When the machine fails") likewise, naming the fault and the way out, with exit
code 3; `--verbose_errors` shows the traceback instead. The standard library only, so a tool fails
before it imports jax. absl mains run inside `reported_in_one_line` (`cli.start`); argparse mains
use `ArgumentParser` and `one_line_errors`.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import NoReturn


class ConfigKeyError(KeyError):
  """An unknown or misspelled config key; the message lists close valid keys."""

  def __str__(self) -> str:  # KeyError would quote the message
    return str(self.args[0])


# Problems of the input (flags, config, data, checkpoint, files): exit code 2 (and absl's
# flags.Error in an absl program).
INPUT_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
                IsADirectoryError, ConfigKeyError)
VERBOSE_FLAG = '--verbose_errors'
MACHINE_FAULT_EXIT = 3


class MachineFault(Exception):
  """The machine, not the input, stopped the work (exit code 3). `leave_at_once`: the process
  exits without running its exit handlers (a lost process: jax's distributed shutdown would wait
  for it, then abort)."""
  leave_at_once = False


class DataFault(MachineFault):
  """A data file is damaged or truncated (a TSV cut mid-line, a zip whose CRC fails, an
  array_record shard cut short, an image that does not decode): the message names the file and
  the record, and says where a good copy comes from (data/bad_records.py)."""


def is_disk_full(error: BaseException | None) -> bool:
  """Whether `error`, or an error it was raised from, is a full disk or quota: an OSError with
  ENOSPC / EDQUOT, or the text of one (orbax / tensorstore raise ValueError('RESOURCE_EXHAUSTED:
  ... No space left on device [os_error_code='28']'))."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, DiskFull) or (isinstance(error, OSError)
                                       and error.errno in (errno.ENOSPC, errno.EDQUOT)):
      return True
    if any(text in str(error) for text in (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))):
      return True
    error = error.__cause__ or error.__context__
  return False


def size_text(num_bytes: float) -> str:
  """1536 -> '1.5 KiB'."""
  for unit in ('bytes', 'KiB', 'MiB', 'GiB'):
    if num_bytes < 1024 or unit == 'GiB':
      return f'{num_bytes:.0f} {unit}' if unit == 'bytes' else f'{num_bytes:.1f} {unit}'
    num_bytes /= 1024
  return ''


def free_space(path: str) -> str:
  """'<free> free of <total>' on the filesystem of `path` (its nearest existing folder)."""
  path = os.path.abspath(path)
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  usage = shutil.disk_usage(path)
  return f'{size_text(usage.free)} free of {size_text(usage.total)}'


class DiskFull(MachineFault):
  """A write failed for want of disk space: one line naming what was not written, the free space
  of `directory`'s filesystem, and `todo` (what stands and what to do). `results`: what the work
  computed before the write failed (eval.py prints its metrics anyway)."""

  def __init__(self, what: str, directory: str,
               todo: str = 'free space and run the same command again', results=None):
    self.what, self.directory, self.results = what, directory, results
    super().__init__(f'disk full: could not write {what}; the filesystem of {directory} has '
                     f'{free_space(directory)}; {todo}')


@contextlib.contextmanager
def writing(what: str, directory: str, todo: str | None = None) -> Iterator[None]:
  """Inside: a full disk is `DiskFull(what, directory, todo)`."""
  try:
    yield
  except DiskFull:
    raise
  except Exception as error:  # pylint: disable=broad-except  (only a full disk is converted)
    if not is_disk_full(error):
      raise
    raise DiskFull(what, directory, **({'todo': todo} if todo else {})) from error


def one_line(message: str) -> str:
  """A message as one line; one that embeds a traceback (config_flags does) -> its last line."""
  lines = [line.strip() for line in str(message).splitlines() if line.strip()]
  if len(lines) > 1 and ('Traceback (most recent call last)' in message or '[Errno' in lines[-1]):
    return lines[-1]
  return ' '.join(' '.join(lines).split())


def fail(message: str, code: int = 2, at_once: bool = False) -> NoReturn:
  """Prints `error: <message>` as one stderr line and exits with `code` (`at_once`: without the
  exit handlers, `os._exit`)."""
  sys.stdout.flush()
  sys.stderr.write('error: ' + one_line(message) + '\n')
  sys.stderr.flush()
  if at_once:
    logging.shutdown()   # flushes the log handlers os._exit would not
    os._exit(code)
  sys.exit(code)


def verbose() -> bool:
  """Whether --verbose_errors was given (absl flag, or an argparse tool's argument)."""
  flags = sys.modules.get('absl.flags')   # imported when an absl program runs
  if (flags is not None and flags.FLAGS.is_parsed() and 'verbose_errors' in flags.FLAGS
      and flags.FLAGS.verbose_errors):
    return True
  return VERBOSE_FLAG in sys.argv[1:]


@contextlib.contextmanager
def reported_in_one_line() -> Iterator[None]:
  """Input errors raised inside -> one stderr line + exit 2; a diverged run -> exit 1; a fault
  of the machine (a full disk anywhere: `is_disk_full`) -> exit 3."""
  flags = sys.modules.get('absl.flags')
  flag_errors = (flags.Error,) if flags is not None else ()
  try:
    yield
  except MachineFault as error:
    if verbose() and not error.leave_at_once:
      raise
    fail(str(error), MACHINE_FAULT_EXIT, at_once=error.leave_at_once)
  except (*INPUT_ERRORS, *flag_errors, FloatingPointError, OSError) as error:
    if verbose():
      raise
    if is_disk_full(error):   # a write no `writing` block named (orbax raises a ValueError)
      path = getattr(error, 'filename', None)
      fail(str(DiskFull(path or 'a file', os.path.dirname(path) if path else os.getcwd())),
           MACHINE_FAULT_EXIT)
    if not isinstance(error, (*INPUT_ERRORS, *flag_errors, FloatingPointError)):
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
