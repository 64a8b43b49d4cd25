"""The path a reader follows from `python -m poolformers_jax.train` to the optimizer update is
short (issue #62): at the moment the training step calls `TrainState.apply_gradients`, the
package's frames on the Python stack span at most 4 files, and following them from the program's
`main` to `apply_gradients` crosses from one file into another at most 6 times (the call into
flax's `apply_gradients` included). Frames of absl, jax and flax between ours are not counted."""
import json
import os
import subprocess
import sys

from tiny_runs import REPO, tiny_overrides

# Runs the program as `python -m poolformers_jax.train` does (runpy, run_name='__main__'), with
# TrainState.apply_gradients replaced by a recorder of the stack that stops the process.
_RECORD = r'''
import inspect, json, os, runpy, sys
from poolformers_jax.trainer import setup
package = os.path.dirname(os.path.abspath(setup.__file__)).rsplit(os.sep, 1)[0] + os.sep

def recorder(self, **kwargs):
  frames = [f for f in reversed(inspect.stack()) if f.filename.startswith(package)]
  print(json.dumps([[os.path.relpath(f.filename, package), f.function] for f in frames]))
  sys.stdout.flush()
  os._exit(0)

setup.TrainState.apply_gradients = recorder
sys.argv = ['python -m poolformers_jax.train'] + sys.argv[1:]
runpy.run_module('poolformers_jax.train', run_name='__main__', alter_sys=True)
'''


def test_from_the_program_to_the_update_in_few_files_and_calls(tmp_path):
  overrides = tiny_overrides(str(tmp_path / 'data'))
  argv = ['--config', 'lra_listops:transformer,tiny', '--workdir', str(tmp_path / 'run'),
          *(f'--config.{k}={v}' for k, v in overrides.items())]
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
  out = subprocess.run([sys.executable, '-c', _RECORD, *argv], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  stack = json.loads(out.stdout.strip().splitlines()[-1])
  files = [path for path, _ in stack]
  assert files[0] == 'train.py' and stack[0][1] == '<module>', stack   # the program's module
  assert files[-1] == 'trainer/step.py', stack                           # the step's update
  crossings = sum(a != b for a, b in zip(files, files[1:])) + 1          # + apply_gradients
  assert len(set(files)) <= 4 and crossings <= 6, (len(set(files)), crossings, stack)
