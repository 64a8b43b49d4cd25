"""Where metrics go: the writers of trainer/writers.py (DIR/metrics.jsonl always, TensorBoard and
Weights & Biases as config.writers names them) and a tqdm progress bar of finished steps (its
rate in steps / s, its ETA and the last logged loss). Only process 0 writes.

A resumed run replays the steps after its checkpoint: the records of those steps are dropped
from metrics.jsonl and purged from TensorBoard (`purge_step`), so every curve has one point per
step. `format_metrics` is how every program shows metrics to people: rounded plain numbers."""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from poolformers_jax.trainer import writers as writers_lib


def _plain(value: Any) -> Any:
  if isinstance(value, (np.generic, np.ndarray, jax.Array)):
    return np.asarray(value).item()
  return value


def format_metrics(metrics: Mapping[str, Any] | None) -> str:
  """'loss 2.296, accuracy 0.1875, count 20': numbers to 4 significant digits, integers whole,
  other values as they print; 'none' for no metrics."""
  if not metrics:
    return 'none'
  shown = []
  for key, value in metrics.items():
    value = _plain(value)
    if isinstance(value, float):
      value = f'{value:.4g}'
    shown.append(f'{key} {value}')
  return ', '.join(shown)


class MetricWriter:
  """The loop's one place for metrics: `write(step, split, metrics)` to every writer (and the
  log when there is no bar), `write_hparams(config)` once, `progress(step, loss=...)`."""

  def __init__(self, workdir: str, *, total_steps: int, initial_step: int = 0,
               progress_bar: bool = True, writers: str = 'tensorboard'):
    self.enabled = jax.process_index() == 0
    self.writers: list[writers_lib.Writer] = []
    self._bar = None
    if not self.enabled:
      return
    self.writers = writers_lib.make_writers(writers, workdir, initial_step)
    if progress_bar:
      from tqdm.auto import tqdm
      self._bar = tqdm(total=total_steps, initial=initial_step, unit='step', dynamic_ncols=True)

  def write(self, step: int, split: str, metrics: dict[str, Any]) -> None:
    if not self.enabled:
      return
    plain = {k: _plain(v) for k, v in metrics.items()}
    line = f'step {step} {split}: ' + format_metrics(
        {k: v for k, v in plain.items() if isinstance(v, float)})
    if self._bar is None:          # no bar (logs of batch jobs): every record as a log line
      logging.info(line)
    elif split != 'train':         # with a bar, train metrics are its postfix
      self._bar.write(line)
    scalars = {f'{split}/{k}': v for k, v in plain.items()}
    for writer in self.writers:
      writer.write_scalars(int(step), scalars)

  def write_hparams(self, config: Mapping[str, Any]) -> None:
    for writer in self.writers:
      writer.write_hparams(config)

  def start_clock(self) -> None:
    """Training starts now: the bar's rate leaves out data preparation and compilation."""
    if self._bar is not None:
      self._bar.unpause()

  def progress(self, finished_step: int, **postfix: Any) -> None:
    """Moves the bar to `finished_step`, a step the device has finished, never one only
    dispatched (the bar would race ahead, stall at every sync, and its rate and ETA would lie)."""
    if self._bar is not None:
      if postfix:
        self._bar.set_postfix({k: f'{_plain(v):.4g}' for k, v in postfix.items()}, refresh=False)
      self._bar.update(finished_step - self._bar.n)

  def close(self) -> None:
    """Closes the bar and the writers (once: a second call does nothing)."""
    bar, writers, self._bar, self.writers = self._bar, self.writers, None, []
    if bar is not None:
      bar.close()
    for writer in writers:
      writer.close()


def read_metrics(workdir: str, split: str | None = None) -> list[dict[str, Any]]:
  """The records of DIR/metrics.jsonl, optionally of one split ('train', 'validation', 'test')."""
  records = writers_lib.read_records(os.path.join(workdir, 'metrics.jsonl'))
  return [r for r in records if split is None or r['split'] == split]
