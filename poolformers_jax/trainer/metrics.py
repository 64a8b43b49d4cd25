"""Where metrics go: DIR/metrics.jsonl (one JSON object per line), TensorBoard event files
(tensorboardX) and a tqdm progress bar of finished steps. Only process 0 writes.

A resumed run replays the steps after its checkpoint: the records of those steps are dropped
from metrics.jsonl and purged from TensorBoard (`purge_step`), so every curve has one point per
step.

A full disk ends the run (errors.DiskFull) and leaves no half record: a record the
disk cannot take is cut off metrics.jsonl again. TensorBoard's events are written to disk here,
at every record (`flush`), not by tensorboardX's writer thread on its own clock (`flush_secs` at
its longest): the thread would die of a full disk with a traceback of its own, and the next
records would wait forever for its full queue."""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import jax
import numpy as np

from poolformers_jax import errors

_NEVER_S = 10**6   # tensorboardX's own flush interval (its thread polls in int milliseconds): never


def _plain(value: Any) -> Any:
  if isinstance(value, (np.generic, np.ndarray, jax.Array)):
    return np.asarray(value).item()
  return value


class MetricWriter:
  def __init__(self, workdir: str, *, total_steps: int, initial_step: int = 0,
               progress_bar: bool = True):
    self.enabled = jax.process_index() == 0
    self.path = os.path.join(workdir, 'metrics.jsonl')
    self._tb = None
    self._bar = None
    if not self.enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    self.tensorboard = os.path.join(workdir, 'tensorboard')
    with errors.writing(self.path, workdir):
      self._drop_after(initial_step)
    from tensorboardX import SummaryWriter
    self._tb = SummaryWriter(self.tensorboard, purge_step=initial_step + 1, max_queue=1000,
                             flush_secs=_NEVER_S)
    if progress_bar:
      from tqdm.auto import tqdm
      self._bar = tqdm(total=total_steps, initial=initial_step, unit='step', dynamic_ncols=True)

  def _drop_after(self, step: int) -> None:
    records = read_metrics(os.path.dirname(self.path))
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

  def write(self, step: int, split: str, metrics: dict[str, Any]) -> None:
    if not self.enabled:
      return
    record = {'step': int(step), 'split': split, 'time': time.time(),
              **{k: _plain(v) for k, v in metrics.items()}}
    line = f'step {step} {split}: ' + ' '.join(
        f'{k}={v:.4g}' for k, v in metrics.items() if isinstance(_plain(v), float))
    if self._bar is None:          # no bar (logs of batch jobs): every record as a log line
      logging.info(line)
    elif split != 'train':         # with a bar, train metrics are its postfix
      self._bar.write(line)
    self._append(json.dumps(record) + '\n')
    assert self._tb is not None   # made in __init__ on the writing process
    with errors.writing(f'the TensorBoard events in {self.tensorboard}', self.tensorboard):
      self._tb.flush()             # the records before this one, which the thread has taken
    for key, value in record.items():
      if key not in ('step', 'split', 'time') and isinstance(value, (int, float)):
        self._tb.add_scalar(f'{split}/{key}', value, int(step))

  def _append(self, line: str) -> None:
    """`line` appended to metrics.jsonl; on a full disk the file is cut back to its end."""
    size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
    try:
      with open(self.path, 'a') as f:
        f.write(line)
    except OSError as error:
      if errors.is_disk_full(error):
        os.truncate(self.path, size)
        raise errors.DiskFull(self.path, os.path.dirname(self.path)) from error
      raise

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
    """Closes the bar and the event file (once: a second call does nothing)."""
    bar, tb, self._bar, self._tb = self._bar, self._tb, None, None
    if bar is not None:
      bar.close()
    if tb is not None:
      with errors.writing(f'the TensorBoard events in {self.tensorboard}', self.tensorboard):
        tb.close()


def read_metrics(workdir: str, split: str | None = None) -> list[dict[str, Any]]:
  """The records of DIR/metrics.jsonl, optionally of one split ('train', 'validation', 'test')."""
  path = os.path.join(workdir, 'metrics.jsonl')
  if not os.path.exists(path):
    return []
  with open(path) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return [r for r in records if split is None or r['split'] == split]
