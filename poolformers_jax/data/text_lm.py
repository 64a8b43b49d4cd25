"""Character-level language modelling: enwik8 and text8 from their official zip files.

Files: {config.data.data_dir}/enwik8.zip (100M bytes of Wikipedia XML) and text8.zip (100M
characters of a-z and space), as distributed at mattmahoney.net/dc.

Splits: the first 90M / next 5M / last 5M symbols (config.data.split_sizes), the standard split
of Al-Rfou et al. and Transformer-XL. Tokens: enwik8 byte + 1 (vocabulary 257; a text is its
UTF-8 bytes); text8 ' ' -> 1, 'a'..'z' -> 2..27 (vocabulary 28); `text` maps generated ids back.
Examples: non-overlapping windows of max_length + 1 symbols, inputs = window[:-1], targets =
window[1:]; the remainder shorter than a window is dropped.

Evaluation as in ContextPool Table 5 (Beltagy et al. 2020, Longformer): with
config.data.eval_protocol='sliding' validation and test are read as overlapping windows of
`eval_context` symbols every `eval_step`; the first window scores all its predictions, every later
one only the new ones, and a last window aligned to the split's end scores what is left, so every
symbol but the first is scored exactly once (each example's 0/1 `weights`).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import zipfile
import zlib

import numpy as np

from poolformers_jax import errors
from poolformers_jax.data import base


def _text8_table():
  table = np.full(256, -1, np.int32)
  table[ord(' ')] = 1
  table[ord('a'):ord('z') + 1] = np.arange(2, 28)
  return table


VOCABS = {'enwik8': (257, np.arange(256, dtype=np.int32) + 1), 'text8': (28, _text8_table())}


def download_todo(name: str) -> str:
  return f'copy the official {name}.zip (mattmahoney.net/dc/{name}.zip) there'


@functools.lru_cache(maxsize=4)
def load_symbols(path: str, member: str) -> np.ndarray:
  """All bytes of `member` inside the zip file at `path`, as uint8; a zip cut short (no central
  directory), a member whose CRC-32 fails or whose compressed stream ends early, or no `member`:
  errors.DataFault naming the file."""
  try:
    with zipfile.ZipFile(path) as archive:
      return np.frombuffer(archive.read(member), np.uint8)
  except (zipfile.BadZipFile, zlib.error, EOFError, KeyError) as error:
    raise errors.DataFault(f'{path} is damaged or cut short ({errors.one_line(str(error))}); '
                           f'{download_todo(member)} again') from error


class WindowSource:
  """Non-overlapping windows of `length + 1` symbols of a 1D uint8 array."""

  def __init__(self, symbols: np.ndarray, length: int):
    self.symbols, self.length = symbols, length

  def __len__(self):
    return max(0, (len(self.symbols) - 1) // self.length)

  def __getitem__(self, index):
    if not 0 <= index < len(self):
      raise IndexError(index)
    start = index * self.length
    return self.symbols[start:start + self.length + 1]


class SlidingWindowSource:
  """Overlapping windows of `context` (+1) symbols every `step`; record i scores its tokens from
  `scored_from` on. A split shorter than the context is one window."""

  def __init__(self, symbols: np.ndarray, context: int, step: int):
    if not 1 <= step <= context:
      raise ValueError(f'sliding evaluation needs 1 <= eval_step <= eval_context; got eval_step='
                       f'{step}, eval_context={context}.')
    self.symbols = symbols
    predictions = len(symbols) - 1             # symbol t is predicted from symbols[:t]
    self.length = min(context, predictions)
    starts = list(range(0, predictions - self.length + 1, step)) if predictions > 0 else []
    if starts and starts[-1] + self.length < predictions:
      starts.append(predictions - self.length)  # aligned to the end: scores what is left
    # A window starting at a predicts symbols a+1 .. a+length; it scores those after the
    # previous window's last prediction.
    ends = [a + self.length for a in starts]
    self.starts = np.asarray(starts, np.int64)
    self.scored_from = np.asarray([0] + [e - a for e, a in zip(ends[:-1], starts[1:])], np.int32)

  def __len__(self):
    return len(self.starts)

  def __getitem__(self, index):
    if not 0 <= index < len(self):
      raise IndexError(index)
    start = int(self.starts[index])
    return {'window': self.symbols[start:start + self.length + 1],
            'scored_from': self.scored_from[index]}


EVAL_PROTOCOLS = ('windows', 'sliding')


def source(settings: CharSettings, split):
  name = settings.name
  path = os.path.join(base.expand_path(settings.data_dir), f'{name}.zip')
  base.require_file(path, f'{download_todo(name)} or set config.data.data_dir to its folder.')
  symbols = load_symbols(path, name)
  train, validation, test = settings.split_sizes
  if train + validation + test > len(symbols):
    raise ValueError(f'{settings.name}: split_sizes {tuple(settings.split_sizes)} need '
                     f'{train + validation + test} symbols but the file has {len(symbols)}.')
  bounds = {'train': (0, train), 'validation': (train, train + validation),
            'test': (train + validation, train + validation + test)}
  start, stop = bounds[base.check_split(split)]
  protocol = settings.eval_protocol
  if protocol not in EVAL_PROTOCOLS:
    raise ValueError(f'config.data.eval_protocol={protocol!r}; choose one of {EVAL_PROTOCOLS}.')
  if protocol == 'sliding' and split != 'train':
    return SlidingWindowSource(symbols[start:stop], settings.eval_context,
                               settings.eval_step)
  return WindowSource(symbols[start:stop], settings.max_length)


def preprocess(record, settings: CharSettings, rng: np.random.Generator | None = None):
  del rng
  _, table = VOCABS[settings.name]
  window = np.asarray(record['window'] if isinstance(record, dict) else record)
  ids = table[window]
  if (ids < 0).any():
    bad = chr(int(window[np.argmax(ids < 0)]))
    raise ValueError(f'{settings.name}: character {bad!r} is outside its vocabulary.')
  example = {'inputs': ids[:-1], 'targets': ids[1:]}
  if isinstance(record, dict):   # sliding evaluation: score the tokens from `scored_from` on
    example['weights'] = (np.arange(len(ids) - 1) >= record['scored_from']).astype(np.float32)
  return example


def info(settings: CharSettings, *, from_files: bool = True) -> base.DatasetInfo:
  vocab_size, _ = VOCABS[settings.name]
  if from_files:
    sizes = {split: len(source(settings, split)) for split in base.SPLITS}
  else:   # the windows WindowSource makes of config.data.split_sizes symbols
    sizes = {split: max(0, (n - 1) // settings.max_length)
             for split, n in zip(base.SPLITS, settings.split_sizes)}
  return base.DatasetInfo(
      name=settings.name, task='lm', num_classes=vocab_size, vocab_size=vocab_size,
      input_shape=(settings.max_length,), split_sizes=sizes)


@dataclasses.dataclass(frozen=True)
class CharSettings(base.DataSettings):
  """enwik8's and text8's settings; data_dir holds enwik8.zip / text8.zip."""
  name: str = 'enwik8'
  max_length: int = 512
  split_sizes: tuple = (90_000_000, 5_000_000, 5_000_000)   # bytes (enwik8) / characters (text8)
  eval_protocol: str = 'windows'  # validation / test: or 'sliding' (module docstring)
  eval_context: int = 32_768
  eval_step: int = 512


def _defaults(name: str):
  return lambda: CharSettings(name=name, data_dir=os.path.join(base.default_data_dir(), name))


def record(raw, settings):
  """A user's text as a window whose inputs are the whole text (one symbol appended)."""
  symbols = np.frombuffer(raw.encode('utf-8') if isinstance(raw, str) else bytes(raw), np.uint8)
  if not len(symbols):
    raise ValueError('an empty text has no next symbol to predict')
  return np.append(symbols, symbols[-1])


def text(ids, settings) -> str:
  """Generated token ids as text, inverting the symbol table: text8's ids are its characters
  (' ', 'a'..'z'); enwik8's are bytes (id - 1), read as UTF-8, where a character cut by the end
  of the generation (or bytes that are no UTF-8) show as U+FFFD."""
  _, table = VOCABS[settings.name]
  symbols = np.zeros(table.max() + 1, np.uint8)
  known = np.flatnonzero(table >= 0)
  symbols[table[known]] = known
  return symbols[np.asarray(ids)].tobytes().decode('utf-8', errors='replace')


for _name in VOCABS:
  base.register_dataset(_name, base.DatasetSpec(info, source, preprocess, _defaults(_name),
                                                shapes=functools.partial(info, from_files=False),
                                                record=record, text=text))
