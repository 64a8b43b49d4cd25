"""Where a run's metrics go, behind clu's MetricWriter interface (without clu, which brings
TensorFlow): DIR/metrics.jsonl always (`JsonlWriter`, one JSON object a split and step, strings
too: the record resuming and the experiments read), and as config.writers names them
(comma-separated, '' for none) TensorBoard (`TensorBoardWriter`, the default) and Weights &
Biases (`WandbWriter`, when installed; WANDB_PROJECT, WANDB_MODE, ... are wandb's own).

A full disk ends the run (errors.DiskFull) and leaves no half record: a record the disk cannot
take is cut off metrics.jsonl again. TensorBoard's events are written to disk at every record
(`flush`), not by tensorboardX's writer thread on its own clock (`flush_secs` at its longest):
the thread would die of a full disk with a traceback of its own, and the next records would wait
forever for its full queue.
"""
from __future__ import annotations

import json
import numbers
import os
import time
from collections.abc import Mapping
from typing import Any, Protocol

from poolformers_jax import errors

_NEVER_S = 10**6   # tensorboardX's own flush interval (its thread polls in int milliseconds): never


class Writer(Protocol):
  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None: ...
  def write_hparams(self, hparams: Mapping[str, Any]) -> None: ...
  def flush(self) -> None: ...
  def close(self) -> None: ...


def numbers_of(scalars: Mapping[str, Any]) -> dict[str, Any]:
  """The numeric values (a bool is not one), but a record's own `step` (the test record's: the
  checkpoint it evaluated, which metrics.jsonl keeps)."""
  return {k: v for k, v in scalars.items() if isinstance(v, numbers.Real)
          and not isinstance(v, bool) and not k.endswith('/step')}


def flat_hparams(config: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  """A nested config as {'optimizer.learning_rate': 0.001, ...}: numbers, strings and bools
  kept, anything else (tuples, None) as its text."""
  out: dict[str, Any] = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      out.update(flat_hparams(value, f'{prefix}{key}.'))
    else:
      plain = isinstance(value, (bool, int, float, str))
      out[f'{prefix}{key}'] = value if plain else str(value)
  return out


class JsonlWriter:
  """DIR/metrics.jsonl; `initial_step`: the records after it (a resumed run replays those steps)
  and every test record are dropped first."""

  def __init__(self, workdir: str, initial_step: int):
    self.path = os.path.join(workdir, 'metrics.jsonl')
    with errors.writing(self.path, workdir):
      self._drop_after(initial_step)

  def _drop_after(self, step: int) -> None:
    records = read_records(self.path)
    kept = [r for r in records if r['step'] <= step and r['split'] != 'test']
    if len(kept) < len(records):
      tmp = self.path + '.tmp'
      try:
        with open(tmp, 'w') as f:
          f.writelines(json.dumps(r) + '\n' for r in kept)
      except OSError:
        os.remove(tmp)
        raise
      os.replace(tmp, self.path)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    by_split: dict[str, dict[str, Any]] = {}
    for key, value in scalars.items():
      split, name = key.split('/', 1)
      by_split.setdefault(split, {})[name] = value
    now = time.time()
    self._append(''.join(json.dumps({'step': int(step), 'split': split, 'time': now, **values})
                         + '\n' for split, values in by_split.items()))

  def _append(self, text: str) -> None:
    """`text` appended; on a full disk the file is cut back to its end."""
    size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
    try:
      with open(self.path, 'a') as f:
        f.write(text)
    except OSError as error:
      if errors.is_disk_full(error):
        os.truncate(self.path, size)
        raise errors.DiskFull(self.path, os.path.dirname(self.path)) from error
      raise

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    del hparams   # DIR/config.json holds them

  def flush(self) -> None:
    pass   # every record is written when it comes

  def close(self) -> None:
    pass


def read_records(path: str) -> list[dict[str, Any]]:
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


class TensorBoardWriter:
  """tensorboardX events in DIR/tensorboard; the steps after `initial_step` are purged."""

  def __init__(self, workdir: str, initial_step: int):
    from tensorboardX import SummaryWriter
    self.directory = os.path.join(workdir, 'tensorboard')
    self._tb = SummaryWriter(self.directory, purge_step=initial_step + 1, max_queue=1000,
                             flush_secs=_NEVER_S)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    self.flush()   # the records before this one, which the thread has taken
    for key, value in numbers_of(scalars).items():
      self._tb.add_scalar(key, value, int(step))

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    from tensorboardX.summary import hparams as hparams_summaries
    for summary in hparams_summaries(flat_hparams(hparams), {}):   # the HParams tab's 3 records
      self._tb.file_writer.add_summary(summary)
    self.flush()

  def flush(self) -> None:
    with errors.writing(f'the TensorBoard events in {self.directory}', self.directory):
      self._tb.flush()

  def close(self) -> None:
    with errors.writing(f'the TensorBoard events in {self.directory}', self.directory):
      self._tb.close()


class WandbWriter:
  """A Weights & Biases run, named after DIR (WANDB_NAME overrides), its files in DIR."""

  def __init__(self, workdir: str):
    import wandb
    workdir = os.path.abspath(workdir)
    self._run = wandb.init(dir=workdir, name=os.environ.get('WANDB_NAME') or
                           os.path.basename(workdir))

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    self._run.log(numbers_of(scalars), step=int(step))

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    self._run.config.update(flat_hparams(hparams), allow_val_change=True)

  def flush(self) -> None:
    pass   # wandb sends from its own process

  def close(self) -> None:
    self._run.finish()


def names_of(writers: str) -> list[str]:
  """config.writers ('tensorboard,wandb') as names."""
  return [n.strip() for n in str(writers).split(',') if n.strip()]


def make_writers(names: str, workdir: str, initial_step: int) -> list[Writer]:
  """metrics.jsonl's writer, then those config.writers names (checked by config.validate)."""
  made: list[Writer] = [JsonlWriter(workdir, initial_step)]
  for name in names_of(names):
    made.append(TensorBoardWriter(workdir, initial_step) if name == 'tensorboard' else
                WandbWriter(workdir))
  return made
