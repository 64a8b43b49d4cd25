"""The saved position of the data iterator in a checkpoint (the `train` extra: grain)."""
from __future__ import annotations

import copy
from typing import Any

import grain


class IteratorState(grain.DatasetIterator):
  """A grain iterator's state, frozen at `save()` time (orbax writes in a background thread,
  when the live iterator may have moved on); on restore the caller hands it to the live one."""

  def __init__(self, state: Any = None):
    super().__init__()
    self.state = copy.deepcopy(state)

  def __next__(self):
    raise TypeError('IteratorState holds a saved position; it yields nothing.')

  def get_state(self) -> Any:
    return self.state

  def set_state(self, state: Any) -> None:
    self.state = state

  def start_prefetch(self) -> None:  # called by grain's handler after set_state
    pass


def save_args(data_iterator: Any) -> Any:
  """What orbax saves of `data_iterator`: a snapshot of its position now."""
  return grain.checkpoint.CheckpointSave(IteratorState(data_iterator.get_state()))
