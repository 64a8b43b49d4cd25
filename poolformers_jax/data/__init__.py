"""Datasets through tensorflow-datasets data sources and grain; no TensorFlow.

    settings = data.settings(config.data)     # the dataset's typed settings (a frozen dataclass)
    info = data.get_dataset_info(settings)
    it = data.make_train_iterator(settings, batch_size=..., seed=..., process_index=..., ...)
    for batch in data.make_eval_iterator(settings, 'validation', batch_size=..., ...): ...
    config.data = data.get_data_config('listops')   # the defaults of the dataset's file

`config.data.name` picks the dataset from `DATASETS` (each dataset file registers itself and
declares its family's settings class, e.g. listops.ListOpsSettings).
Nothing is downloaded at run time; where each dataset's files must be: docs/data.md.
Missing files raise DataNotFoundError naming the path and what to do; a damaged or truncated
one, errors.DataFault naming the file and the record (config.data.skip_bad_records skips bad
records instead, counted: bad_records.py).
With worker_count > 0 the iterator state has another format: resume with the same worker_count.
"""
from poolformers_jax.data.base import (
  DATASETS,
  DataNotFoundError,
  DatasetInfo,
  DatasetSpec,
  DataSettings,
  get_data_config,
  register_dataset,
  settings,
)
from poolformers_jax.data.info import get_dataset_info

# The pipeline (grain, jax) and the readers (the `train` extra) load on first use, so a config
# loads, and its model builds, on the core install.
_PIPELINE = ('Streams', 'eval_num_batches', 'make_eval_iterator', 'make_eval_stream',
             'make_train_iterator')


def __getattr__(name: str):
  if name in _PIPELINE:
    from poolformers_jax.data import pipeline
    return getattr(pipeline, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = ['DATASETS', 'DataNotFoundError', 'DataSettings', 'DatasetInfo', 'DatasetSpec',
           'register_dataset', 'get_data_config', 'get_dataset_info', 'settings', *_PIPELINE]
