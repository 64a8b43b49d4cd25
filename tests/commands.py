"""Runs command lines of the project's Python entry points, each in its own forked process.

    python tests/commands.py run|parse < [argv, ...] (JSON)  ->  [{code, stdout, stderr}, ...]

Each argv is what follows `python`: `['train.py', '--config', ...]` or `['-m',
'poolformers_jax.average', ...]`. The libraries every entry point imports (jax, flax, the package)
are imported once here; every command then runs in a fork of this process, so it costs what the
command itself does, not a fresh interpreter's seconds of imports, and no flag or state of one
command can reach the next.

- `run`: the command as a user runs it (the error-path tests: exit code and stderr).
- `parse`: the command's own parser reads the arguments (absl flags, or argparse), a `--config`
  file is loaded with its `--config.key=value` overrides, and the command stops there, exit 0; a
  tool with its own `--dry_run` (reproduce) runs that instead. Nothing is trained or compiled
  (the documentation test).
"""
import json
import os
import runpy
import signal
import sys
import tempfile
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 120   # one command


def _stop_after_parsing():
  """`parse` mode: absl's app.run and our argparse parser stop once the arguments are read."""
  import argparse

  from absl import app, flags

  from poolformers_jax import cli, config as config_lib, errors

  def run(main, argv=None, flags_parser=None):
    del main
    (flags_parser or flags.FLAGS)(sys.argv if argv is None else argv)
    if 'config' in flags.FLAGS:
      value = flags.FLAGS['config'].value
      if isinstance(value, str):              # a plain string flag naming a config file
        config_lib.load_file(value)
      else:                                   # config_flags: loaded, overrides applied, here
        cli.config_value(flags.FLAGS['config'])
    sys.exit(0)

  def parse_args(self, args=None, namespace=None):
    parsed = argparse.ArgumentParser.parse_args(self, args, namespace)
    if not hasattr(parsed, 'dry_run'):
      sys.exit(0)
    parsed.dry_run = True
    return parsed

  app.run = run
  errors.ArgumentParser.parse_args = parse_args


def _child(argv: list[str], out: int, err: int) -> None:
  os.dup2(out, 1)
  os.dup2(err, 2)
  signal.alarm(TIMEOUT_S)
  code = 0
  try:
    if argv[0] == '-m':
      sys.argv = [argv[1]] + argv[2:]
      runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
    else:
      sys.argv = argv
      runpy.run_path(os.path.join(ROOT, argv[0]), run_name='__main__')
  except SystemExit as exit_:
    code = exit_.code if isinstance(exit_.code, int) else (exit_.code is not None)
    if isinstance(exit_.code, str):
      sys.stderr.write(exit_.code + '\n')
  except BaseException:  # pylint: disable=broad-except  (reported like an uncaught exception)
    traceback.print_exc()
    code = 1
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_each(commands: list[list[str]]) -> list[dict]:
  results = []
  for argv in commands:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
      sys.stdout.flush()
      sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        _child(argv, out.fileno(), err.fileno())
      _, status = os.waitpid(pid, 0)
      code = os.waitstatus_to_exitcode(status)
      out.seek(0)
      err.seek(0)
      results.append({'argv': argv, 'code': code, 'stdout': out.read().decode(errors='replace'),
                      'stderr': err.read().decode(errors='replace')})
  return results


def main() -> None:
  mode = sys.argv[1]
  commands = json.load(sys.stdin)
  os.chdir(ROOT)
  sys.path.insert(0, ROOT)
  # What the entry points import anyway, once, before the forks.
  # Only libraries: a package module run with -m must not be imported before (a dataset
  # module would register its name twice).
  import importlib
  for module in ('jax', 'flax.linen', 'optax', 'orbax.checkpoint', 'grain', 'ml_collections',
                 'tensorflow_datasets', 'absl.app'):
    importlib.import_module(module)
  if mode == 'parse':
    _stop_after_parsing()
  results = run_each(commands)
  sys.stdout.write(json.dumps(results))


if __name__ == '__main__':
  main()
