"""`get_dataset_info`: what a dataset is (task, classes, vocabulary, shapes, split sizes), from
its files or, with need_files=False, its known constants; `Preprocess`: one record as the example
the pipeline (and load_run) makes of it. Both take the dataset's typed settings
(`base.settings(config.data)`). Plain Python and numpy: completing a config needs no data reader."""
from __future__ import annotations

import numpy as np

from poolformers_jax.data import base, masking


def objective(settings: base.DataSettings) -> str | None:
  """The settings' self-pretraining objective (masking.objective; None: the dataset's own task)."""
  return masking.objective(float(settings.mask_rate), bool(settings.next_tokens))


def get_dataset_info(settings: base.DataSettings, *,
                     need_files: bool = True) -> base.DatasetInfo:
  """DatasetInfo of the dataset (DataNotFoundError if files are missing; with need_files=False,
  the dataset's known constants instead where it has them); the self-pretraining info with
  mask_rate > 0 or next_tokens."""
  spec = base.get_spec(settings.name)
  try:
    info = spec.info(settings)
  except base.DataNotFoundError:
    if need_files or spec.shapes is None:
      raise
    info = spec.shapes(settings)
  wanted = objective(settings)
  return masking.pretraining_info(info, wanted) if wanted else info


class Preprocess:
  """Picklable (for grain workers) `record[, rng] -> example` of one dataset; with mask_rate > 0
  or next_tokens, the self-pretraining example of it."""

  def __init__(self, settings: base.DataSettings):
    self.settings = settings
    self.objective = objective(settings)
    self.mask_rate = float(settings.mask_rate)
    # The [MASK] id is the data's vocabulary size, read once (not per example); None: the task.
    self.mask_id = (base.get_spec(settings.name).info(settings).vocab_size
                    if self.objective else None)

  def __call__(self, record, rng: np.random.Generator | None = None):
    example = base.get_spec(self.settings.name).preprocess(record, self.settings, rng)
    if self.objective and self.mask_id is not None:
      example = masking.pretraining_example(example, self.objective, self.mask_rate,
                                            self.mask_id, rng)
    return example
