"""`get_dataset_info`: what a config's dataset is (task, classes, vocabulary, shapes, split
sizes), from its files or, with need_files=False, its known constants; `Preprocess`: one record
as the example the pipeline (and load_run) makes of it. Plain Python and numpy: completing a
config needs no data reader."""
from __future__ import annotations

import numpy as np

from poolformers_jax.data import base, masking


def objective(data_config) -> str | None:
  """config.data's self-pretraining objective (masking.objective; None: the dataset's own task;
  data configs older than mask_rate / next_tokens have neither)."""
  return masking.objective(float(data_config.get('mask_rate', 0.0)),
                           bool(data_config.get('next_tokens', False)))


def get_dataset_info(config, *, need_files: bool = True) -> base.DatasetInfo:
  """DatasetInfo of config.data (DataNotFoundError if files are missing; with need_files=False,
  the dataset's known constants instead where it has them); the self-pretraining info with
  config.data.mask_rate > 0 or next_tokens."""
  data_config = config.data
  spec = base.get_spec(data_config.name)
  try:
    info = spec.info(data_config)
  except base.DataNotFoundError:
    if need_files or spec.shapes is None:
      raise
    info = spec.shapes(data_config)
  wanted = objective(data_config)
  return masking.pretraining_info(info, wanted) if wanted else info


class Preprocess:
  """Picklable (for grain workers) `record[, rng] -> example` of one dataset; with
  config.data.mask_rate > 0 or next_tokens, the self-pretraining example of it."""

  def __init__(self, data_config):
    self.data_config = data_config
    self.objective = objective(data_config)
    self.mask_rate = float(data_config.get('mask_rate', 0.0))
    # The [MASK] id is the data's vocabulary size, read once (not per example); None: the task.
    self.mask_id = (base.get_spec(data_config.name).info(data_config).vocab_size
                    if self.objective else None)

  def __call__(self, record, rng: np.random.Generator | None = None):
    example = base.get_spec(self.data_config.name).preprocess(record, self.data_config, rng)
    if self.objective and self.mask_id is not None:
      example = masking.pretraining_example(example, self.objective, self.mask_rate,
                                            self.mask_id, rng)
    return example
