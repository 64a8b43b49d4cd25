"""The run's config travels a short way (issue #62): from `train_and_evaluate` to the first train
step of a tiny ListOps run, the calls of package functions given a ConfigDict stay in few files
and seldom come back to one they left (benchmarks/config_walk.py defines and prints the walk).
The modules below the program take typed values: the steps, the state, the optimizer, the model's
registry, the machine checks, the generator and the datasets never see the config (data/base.py's
`settings` makes the datasets' typed settings of config.data, once)."""
import os
import sys

import pytest
from tiny_runs import REPO

from poolformers_jax.trainer.metrics import MetricWriter

sys.path.insert(0, os.path.join(REPO, 'benchmarks'))
import config_walk  # noqa: E402

# What the walk reaches today (docs/design.md, "The walk of the config"); issue #62 asks for 7 / 6.
MAX_FILES, MAX_RETURNS = 6, 5
TYPED_MODULES = ('trainer/step.py', 'trainer/optim.py', 'trainer/faults.py', 'trainer/flops.py',
               'trainer/utilisation.py', 'models/registry.py', 'models/block.py',
               'data/generators/listops.py', 'data/bad_records.py', 'trainer/integrity.py',
               'data/info.py', 'data/pipeline.py', 'data/listops.py', 'data/masking.py')


class _FirstStep(Exception):
  """Raised once the walk has ended (right before the first train step): nothing to train."""


def test_the_config_stays_in_few_files(tmp_path, monkeypatch):
  start_clock = MetricWriter.start_clock

  def stop_at_the_first_step(self):
    start_clock(self)   # the walk's end, seen in the package
    raise _FirstStep

  monkeypatch.setattr(MetricWriter, 'start_clock', stop_at_the_first_step)
  walk = config_walk.Walk()
  with pytest.raises(_FirstStep):
    config_walk.measure(str(tmp_path / 'run'), str(tmp_path / 'data'), walk)
  assert walk.done
  stays = config_walk.stays(walk.calls)
  files = [path for path, _ in stays]
  assert files[0] == files[-1] == 'poolformers_jax/train.py', files
  assert not {f.removeprefix('poolformers_jax/') for f in files} & set(TYPED_MODULES), files
  assert len(set(files)) <= MAX_FILES and len(files) - len(set(files)) <= MAX_RETURNS, stays
