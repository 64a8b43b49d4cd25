"""Training and evaluation: `train_and_evaluate(config, workdir)` and `evaluate(...)`.

They need the `train` extra (grain, tensorflow-datasets, pillow). Without it this package still
imports, so the modules that read a run (checkpoint, setup) serve `load_run(...).predict` on the
core install, and the names below fail on use in one line naming the extra."""
from poolformers_jax import extras

try:
  extras.require('train', __name__)
except extras.MissingExtraError as _missing:
  _MISSING = _missing

  def __getattr__(name: str):
    if name in ('evaluate', 'evaluate_state', 'NonFiniteLossError', 'TrainResult',
                'train_and_evaluate'):
      raise extras.MissingExtraError(str(_MISSING), name=_MISSING.name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
else:
  # pylint: disable=g-import-not-at-top
  from poolformers_jax.train.evaluate import evaluate, evaluate_state  # noqa: F401
  from poolformers_jax.train.loop import (NonFiniteLossError, TrainResult,  # noqa: F401
                                          train_and_evaluate)
