"""Training and evaluation: `train_and_evaluate(config, workdir)` and `evaluate(...)`."""
from poolformers_jax.train.evaluate import evaluate, evaluate_state
from poolformers_jax.train.loop import NonFiniteLossError, TrainResult, train_and_evaluate

