r"""The walk of a run's config through the package: how often it returns to a file it left.

  PYTHONPATH=. XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      .venv/bin/python benchmarks/config_walk.py [--show]

What is measured (issue #48): a tiny training (`configs/lra_listops.py:transformer,tiny` with
tests/train/tiny_runs.py's sizes, on a freshly generated ListOps set in a temporary directory)
runs under `sys.setprofile`. From the call of `train_and_evaluate` until the training loop
starts (the call of `MetricWriter.start_clock`, right before the first train step), every
Python function call in the main thread is looked at:

- a *config call* is a call of a function defined in a file of the package `poolformers_jax/`
  one of whose arguments (positional, keyword, or an item of *args / **kwargs) is an
  `ml_collections.ConfigDict` (the run's config or a part of it: config.model, config.data, ...).
  Generator resumptions are not calls (only a frame's first entry counts).
- the *walk* is the sequence of the files (relative to the repository) of the config calls, in
  call order.
- a *stay* is a maximal run of consecutive walk entries in one file; `files` counts the distinct
  files; a *return* is a stay in a file an earlier stay left: returns = stays - files.

The output is one JSON line: {"stays", "files", "returns", "calls"}. The target (issue #62): at
most 7 files and 6 returns (docs/design.md, "Configuration"; tests/train/test_config_walk.py).
"""
import argparse
import itertools
import json
import os
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import ml_collections  # noqa: E402

PACKAGE = os.path.join(ROOT, 'poolformers_jax') + os.sep
CONFIG_TYPES = (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)

# The `tiny` word sizes the model and the run; the walk ends at the first step, so only the
# generated trees need shrinking (a few hundred instead of the 98 000 of the LRA split).
TINY_DATA = {'data.generator.num_train': 64, 'data.generator.num_validation': 20,
             'data.generator.num_test': 20, 'data.generator.max_tokens': 30}


def _arguments(frame) -> list:
  code = frame.f_code
  count = code.co_argcount + code.co_kwonlyargcount
  names = list(code.co_varnames[:count])
  flags = code.co_flags
  if flags & 0x04:   # CO_VARARGS
    names.append(code.co_varnames[count])
    count += 1
  if flags & 0x08:   # CO_VARKEYWORDS
    names.append(code.co_varnames[count])
  values = []
  for name in names:
    value = frame.f_locals.get(name)
    if isinstance(value, tuple):
      values.extend(value)
    elif isinstance(value, dict) and not isinstance(value, CONFIG_TYPES):
      values.extend(value.values())
    else:
      values.append(value)
  return values


class Walk:
  """A profile function recording the walk between `start` and `stop` (function names)."""

  def __init__(self, start: str = 'train_and_evaluate', stop: str = 'start_clock'):
    self.start, self.stop = start, stop
    self.on, self.done = False, False
    self.stack: list = []                    # the active config frames, innermost last
    self.calls: list[tuple[str, str]] = []   # (file, function) at each change of position

  def _at(self) -> None:
    code = self.stack[-1].f_code
    self.calls.append((os.path.relpath(code.co_filename, ROOT), code.co_qualname))

  def __call__(self, frame, event, arg):
    del arg
    if self.done or event not in ('call', 'return'):
      return
    code = frame.f_code
    if not code.co_filename.startswith(PACKAGE):
      return
    if event == 'return':
      if self.stack and self.stack[-1] is frame:
        self.stack.pop()
        if self.stack:
          self._at()
      return
    if not self.on:
      self.on = code.co_name == self.start
      if not self.on:
        return
    elif code.co_name == self.stop:
      self.done = True
      return
    if any(isinstance(v, CONFIG_TYPES) or isinstance(getattr(v, 'config', None), CONFIG_TYPES)
           for v in _arguments(frame)):
      self.stack.append(frame)
      self._at()


def stays(calls: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
  """(file, its functions) of each run of consecutive calls in one file."""
  return [(path, [function for _, function in run])
          for path, run in itertools.groupby(calls, key=lambda call: call[0])]


def measure(workdir: str, data_dir: str, walk: Walk | None = None) -> Walk:
  """The walk of the tiny run in `workdir` (its data generated into `data_dir`) into `walk`."""
  import poolformers_jax
  from poolformers_jax.train import train_and_evaluate
  config = poolformers_jax.config.load('configs/lra_listops.py:transformer,tiny',
                                       {**TINY_DATA, 'data.data_dir': data_dir})
  walk = walk or Walk()
  sys.setprofile(walk)
  try:
    train_and_evaluate(config, workdir)
  finally:
    sys.setprofile(None)
  assert walk.done, 'the training loop never started'
  return walk


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--show', action='store_true', help='print the stays in order')
  args = parser.parse_args()
  assert threading.current_thread() is threading.main_thread()
  with tempfile.TemporaryDirectory() as tmp:
    walk = measure(os.path.join(tmp, 'run'), os.path.join(tmp, 'data'))
  runs = stays(walk.calls)
  if args.show:
    for path, functions in runs:
      print(f'{path:45s} {" ".join(dict.fromkeys(functions))}')
  files = len({path for path, _ in runs})
  print(json.dumps({'stays': len(runs), 'files': files, 'returns': len(runs) - files,
                    'calls': len(walk.calls)}))


if __name__ == '__main__':
  main()
