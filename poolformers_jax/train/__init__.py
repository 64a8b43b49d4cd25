"""Training and evaluation: `train_and_evaluate(config, workdir)` and `evaluate(...)`."""
from poolformers_jax import extras

extras.require('train', __name__)   # before the imports below fail deep inside one of them

# pylint: disable=g-import-not-at-top,wrong-import-position
from poolformers_jax.train.evaluate import evaluate, evaluate_state  # noqa: E402
from poolformers_jax.train.loop import NonFiniteLossError, TrainResult, train_and_evaluate  # noqa: E402

