"""ListOps (Nangia & Bowman 2018, as the Long Range Arena generates it): a seeded generator, a
fixed vocabulary, a TFDS builder (array_record) and a reader for the official LRA TSV files.

The official recipe (lra_benchmarks/data/listops.py): operators MIN, MAX, MED (median, floored),
SM (sum mod 10) over digits 0-9. A node at depth < max_depth is a digit with probability 0.75,
otherwise an operator with 2..max_args arguments (uniform), each one level deeper; the root has
depth 1 and a node at max_depth is always a digit. A tree is kept when
min_tokens < length < max_tokens (strict, as the official code), where length counts 2 per
operator ('[OP' and ']') and 1 per digit. Examples are unique; train/validation/test are disjoint.

The official files write a tree with the parentheses of its binary nesting,
`[MAX 2 9 ]` -> `( ( ( [MAX 2 ) 9 ) ] )`, and tokens are whitespace-split.

Decisions where the official code is loose:
- The vocabulary is fixed here (the LRA code built it at run time from a Python set, so ids
  changed between runs): pad=0, digits, '[MIN', '[MAX', '[MED', '[SM', ']', '(', ')'.
- Parentheses carry no information beyond ']' and the official length budget (2000) ignores
  them, so by default they are dropped when tokenising (config.data.keep_parentheses=False).
- config.data.tokenizer: 'brackets' (the default) keeps '[MAX' ... ']'. 'alphanumeric' is the
  LRA input pipeline as first released (docs/data.md names the change), which the Nystromformer
  LRA code that PoNet and AdaMRA ran calls: `tfds.deprecated.text.Tokenizer()` keeps the runs of
  word characters only, so `[MAX 2 9 [MIN 4 7 ] 0 ]` becomes `MAX 2 9 MIN 4 7 0` (no brackets: the
  tree's shape is not in the input). The LRA baseline and Nystromformer numbers (papers.json) were
  trained on that; the later pipeline keeps ']'. Here the run 'MAX' takes the id of
  '[MAX' (same vocabulary, same model shapes), and '(' ')' ']' are dropped.
- Our generator draws only `random.Random(seed).random()` (Mersenne Twister; Python guarantees
  this stream for a seed across versions and platforms, and it is cheaper than numpy's
  scalar calls; integers are floor(u * n)), keeps the first unique trees in generation order
  (train first, then validation, then test) instead of iterating a Python set, draws the trees in
  chunks of 256 with one stream per (seed, chunk) so that all cores can generate them and the
  result does not depend on the core count, and stops
  growing a tree as soon as it is too long (the accepted trees are distributed as in the
  official rejection sampler; only the random stream differs).
"""
from __future__ import annotations

import functools
import hashlib
import os
import random
import re
import sys
from typing import Optional, Sequence

import numpy as np

from poolformers_jax import errors
from poolformers_jax.data import base

MIN, MAX, MED, SUM_MOD, END = '[MIN', '[MAX', '[MED', '[SM', ']'
OPERATORS = (MIN, MAX, MED, SUM_MOD)
PAD = '<pad>'
VOCAB = (PAD,) + tuple(str(d) for d in range(10)) + OPERATORS + (END, '(', ')')
TOKEN_TO_ID = {token: i for i, token in enumerate(VOCAB)}
PAREN_IDS = (TOKEN_TO_ID['('], TOKEN_TO_ID[')'])
_NOT_PAREN = np.ones(256, bool)   # uint8 id -> kept; a table lookup, cheaper than np.isin
_NOT_PAREN[list(PAREN_IDS)] = False
NUM_CLASSES = 10
TOKENIZERS = ('brackets', 'alphanumeric')
# tfds.deprecated.text.Tokenizer (core/deprecated/text/text_encoder.py): ALPHANUM_REGEX.
_NON_WORD_RUNS = re.compile(r'\W+', flags=re.UNICODE)
# The alphanumeric runs of the official strings -> ids: 'MAX' takes the id of '[MAX'.
ALPHANUMERIC_TO_ID = {**{op[1:]: TOKEN_TO_ID[op] for op in OPERATORS},
                      **{str(d): TOKEN_TO_ID[str(d)] for d in range(10)}}
_ALPHANUMERIC_KEPT = _NOT_PAREN.copy()   # uint8 id -> kept by 'alphanumeric': no ( ) ]
_ALPHANUMERIC_KEPT[TOKEN_TO_ID[END]] = False
DIGIT_PROBABILITY = 0.75   # the official VALUE_P = 0.25 is the operator probability

TSV_FILES = {'train': 'basic_train.tsv', 'validation': 'basic_val.tsv', 'test': 'basic_test.tsv'}


# --------------------------------------------------------------------------------------------
# Trees: a digit is an int, an operator node is (op, [children]).

class _TooLong(Exception):
  pass


def _below(rng: random.Random, n: int) -> int:
  """Uniform integer in [0, n) from random() alone (its stream is the one Python guarantees)."""
  return int(rng.random() * n)


def generate_tree(rng: random.Random, max_depth: int = 10, max_args: int = 10,
                  max_tokens: int = sys.maxsize):
  """One random tree from the official recipe; raises _TooLong once it reaches max_tokens."""
  length = 0

  def node(depth):
    nonlocal length
    is_digit = depth >= max_depth or rng.random() < DIGIT_PROBABILITY
    if is_digit:
      length += 1
      if length >= max_tokens:
        raise _TooLong
      return _below(rng, 10)
    length += 2
    if length >= max_tokens:
      raise _TooLong
    num_args = 2 + _below(rng, max_args - 1)
    children = [node(depth + 1) for _ in range(num_args)]
    return OPERATORS[_below(rng, len(OPERATORS))], children

  tree = node(1)
  return tree, length


def evaluate(tree) -> int:
  """The label: value of the tree (MED is the floored median, SM the sum mod 10)."""
  if isinstance(tree, int):
    return tree
  op, children = tree
  values = [evaluate(c) for c in children]
  if op == MIN:
    return min(values)
  if op == MAX:
    return max(values)
  if op == MED:
    return int(np.floor(np.median(values)))
  if op == SUM_MOD:
    return sum(values) % 10
  raise ValueError(f'unknown operator {op!r}.')


def to_tokens(tree, parentheses: bool = True) -> list[str]:
  """The official string form, whitespace-split: `( ( ( [MAX 2 ) 9 ) ] )`."""
  if isinstance(tree, int):
    return [str(tree)]
  op, children = tree
  if not parentheses:
    out = [op]
    for c in children:
      out += to_tokens(c, False)
    return out + [END]
  out = ['('] * (len(children) + 1) + [op] + to_tokens(children[0])
  for c in children[1:]:
    out += [')'] + to_tokens(c)
  return out + [')', END, ')']


def parse(text: str):
  """Inverse of to_tokens, with or without parentheses: '[MAX 2 9 [MIN 4 7 ] 0 ]' -> tree."""
  tokens = [t for t in text.split() if t not in ('(', ')')]
  position = 0

  def node():
    nonlocal position
    token = tokens[position]
    position += 1
    if token in OPERATORS:
      children = []
      while tokens[position] != END:
        children.append(node())
      position += 1
      return token, children
    if token.isdigit() and len(token) == 1:
      return int(token)
    raise ValueError(f'unexpected ListOps token {token!r} in {text[:60]!r}.')

  tree = node()
  if position != len(tokens):
    raise ValueError(f'trailing tokens after a complete ListOps tree in {text[:60]!r}.')
  return tree


def encode(tokens: Sequence[str]) -> np.ndarray:
  try:
    return np.asarray([TOKEN_TO_ID[t] for t in tokens], np.uint8)
  except KeyError as e:
    raise ValueError(f'token {e.args[0]!r} is not in the ListOps vocabulary {VOCAB}.') from None


def alphanumeric_tokens(text: str) -> list[str]:
  """`tfds.deprecated.text.Tokenizer().tokenize(text)` (alphanum_only=True, no reserved tokens),
  the 2020 LRA pipeline's: `text` split on runs of non-word characters (regex \\W+, Unicode;
  word characters are Unicode letters and digits and '_'), empty strings dropped."""
  return [t for t in _NON_WORD_RUNS.split(text) if t]


def encode_text(text: str, tokenizer: str = 'brackets') -> np.ndarray:
  """Token ids of a ListOps string as `tokenizer` reads it ('brackets': whitespace-split)."""
  if tokenizer == 'brackets':
    return encode(text.split())
  tokens = alphanumeric_tokens(text)
  try:
    return np.asarray([ALPHANUMERIC_TO_ID[t] for t in tokens], np.uint8)
  except KeyError as e:
    raise ValueError(f'alphanumeric token {e.args[0]!r} is not a ListOps operator or digit '
                     f'{sorted(ALPHANUMERIC_TO_ID)}.') from None


def decode(ids) -> str:
  return ' '.join(VOCAB[i] for i in np.asarray(ids) if i != 0)


CHUNK_TREES = 256   # accepted trees per chunk; chunk k has its own seeded stream


def _chunk(args) -> list[tuple[np.ndarray, int]]:
  """The first CHUNK_TREES trees with min_tokens < length < max_tokens of chunk `index`."""
  seed, index, min_tokens, max_tokens, max_depth, max_args = args
  rng = random.Random(f'listops/{seed}/{index}')   # str seeds hash with sha512: stable everywhere
  out, attempts = [], 0
  while len(out) < CHUNK_TREES:
    attempts += 1
    if attempts > 1000 * CHUNK_TREES + 100000:
      raise RuntimeError(f'ListOps: too few trees with {min_tokens} < length < {max_tokens}; '
                         'widen the length range or raise max_depth.')
    try:
      tree, length = generate_tree(rng, max_depth, max_args, max_tokens)
    except _TooLong:
      continue
    if length > min_tokens:
      out.append((encode(to_tokens(tree)), evaluate(tree)))
  return out


def _num_workers() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1


def generate_splits(seed: int, sizes: Sequence[int], min_tokens: int, max_tokens: int,
                    max_depth: int = 10, max_args: int = 10, workers: Optional[int] = None):
  """Unique (token ids with parentheses, label) lists, one per size, disjoint, from `seed`.

  Trees come in fixed chunks, each from its own stream seeded by (seed, chunk index); chunks are
  merged in index order keeping the first copy of each tree. So the output depends on the seed
  only, not on how many processes (`workers`, default: all cores) made the chunks.
  """
  if not 0 <= min_tokens < max_tokens - 1:
    raise ValueError(f'ListOps needs 0 <= min_tokens < max_tokens - 1; got {min_tokens}, {max_tokens}.')
  total = sum(sizes)
  workers = workers or _num_workers()
  seen, examples, next_chunk = set(), [], 0
  while len(examples) < total:
    # Enough chunks for what is missing (plus 5 % for duplicates); more rounds if still short.
    count = -(-(total - len(examples)) * 21 // 20 // CHUNK_TREES) or 1
    tasks = [(seed, k, min_tokens, max_tokens, max_depth, max_args)
             for k in range(next_chunk, next_chunk + count)]
    next_chunk += count
    if workers > 1 and count >= 8:
      # Worth the start of the worker processes. spawn, not fork: the caller may hold JAX's
      # threads.
      import multiprocessing
      with multiprocessing.get_context('spawn').Pool(min(workers, count)) as pool:
        chunks = pool.map(_chunk, tasks, chunksize=1)
    else:
      chunks = map(_chunk, tasks)
    for chunk in chunks:
      for ids, label in chunk:
        key = hashlib.blake2b(ids.tobytes(), digest_size=16).digest()  # 16 bytes, not the tree
        if key not in seen and len(examples) < total:
          seen.add(key)
          examples.append((ids, label))
  out, start = [], 0
  for size in sizes:
    out.append(examples[start:start + size])
    start += size
  return out


# --------------------------------------------------------------------------------------------
# TFDS builder: one builder config per set of generation parameters.

def _builder_class():
  """Defined lazily so importing the package does not import tensorflow_datasets."""
  global _BUILDER
  if _BUILDER is not None:
    return _BUILDER
  import tensorflow_datasets as tfds

  class PoolformersListopsConfig(tfds.core.BuilderConfig):

    def __init__(self, *, seed, min_tokens, max_tokens, max_depth, max_args,
                 num_train, num_validation, num_test):
      self.seed, self.min_tokens, self.max_tokens = seed, min_tokens, max_tokens
      self.max_depth, self.max_args = max_depth, max_args
      self.sizes = {'train': num_train, 'validation': num_validation, 'test': num_test}
      name = (f'seed{seed}_len{min_tokens}-{max_tokens}_depth{max_depth}_args{max_args}'
              f'_n{num_train}-{num_validation}-{num_test}')
      super().__init__(name=name, version='1.0.0',
                       description='ListOps generated by poolformers_jax (official LRA recipe).')

  class PoolformersListops(tfds.core.GeneratorBasedBuilder):
    """ListOps from the official LRA recipe, seeded; tokens include the parentheses."""
    VERSION = tfds.core.Version('1.0.0')
    BUILDER_CONFIGS = []
    # Nothing is downloaded, so no checksums file; without this TFDS resolves the package's
    # resource path, which needs the optional importlib_resources package.
    code_path = None

    def _info(self):
      features = tfds.features.FeaturesDict({
          'tokens': tfds.features.Tensor(shape=(None,), dtype=np.uint8),
          'label': tfds.features.ClassLabel(num_classes=NUM_CLASSES),
      })
      return tfds.core.DatasetInfo(builder=self, features=features,
                                   description='ListOps, official LRA recipe, fixed vocabulary: '
                                   + ' '.join(VOCAB))

    def _split_generators(self, dl_manager):
      del dl_manager
      c = self.builder_config
      names = list(c.sizes)
      splits = generate_splits(c.seed, [c.sizes[n] for n in names], c.min_tokens, c.max_tokens,
                               c.max_depth, c.max_args)
      return {n: self._generate_examples(s) for n, s in zip(names, splits)}

    def _generate_examples(self, examples):
      for i, (ids, label) in enumerate(examples):
        yield i, {'tokens': ids, 'label': label}

  _BUILDER = (PoolformersListops, PoolformersListopsConfig)
  return _BUILDER


_BUILDER = None


_GENERATOR_FIELDS = ('seed', 'min_tokens', 'max_tokens', 'max_depth', 'max_args', 'num_train',
                     'num_validation', 'num_test')


def _generator_key(data_config) -> tuple[str, tuple[int, ...]]:
  """(data_dir, generator settings): what names one prepared dataset."""
  params = tuple(int(data_config.generator[k]) for k in _GENERATOR_FIELDS)
  return base.expand_path(data_config.data_dir), params


def prepare(data_config):
  """Generates the array_record files under data_dir unless they exist; returns the builder."""
  return _prepared_builder(*_generator_key(data_config))


@functools.lru_cache(maxsize=16)
def _prepared_builder(data_dir: str, params: tuple[int, ...]):
  from absl import logging
  from tensorflow_datasets.core.utils import tqdm_utils
  builder_cls, config_cls = _builder_class()
  config = config_cls(**dict(zip(_GENERATOR_FIELDS, params)))
  builder = builder_cls(data_dir=data_dir, config=config)
  if not builder.is_prepared():
    logging.info('Generating ListOps %s into %s (once).', config.name, data_dir)
    shown = tqdm_utils._active  # pylint: disable=protected-access
    tqdm_utils.display_progress_bar(False)
    try:
      builder.download_and_prepare(file_format='array_record')
    except OSError:
      # Several hosts preparing at once: TFDS writes to a temporary folder and renames it, so
      # the loser's rename fails while the winner's files are complete and identical (seeded).
      builder = builder_cls(data_dir=data_dir, config=config)
      if not builder.is_prepared():
        raise
    finally:
      tqdm_utils.display_progress_bar(shown)
  return builder


class InMemoryRecords:
  """A split's records ({'tokens': uint8 ids, 'label'}) read once into one flat array.

  A ListOps record is ~3 KB with its parentheses, so the paper's 96 000 training trees take
  ~300 MB. Read one at a time from array_record, each record pays a random read and TFDS's proto
  decoding, which capped the training input below the rate a ListOps step consumes (the figures:
  docs/data.md). Here the split is read in large batched reads at start, then a record is two
  slices. The records, and so every batch, are the same."""

  CHUNK = 4096

  def __init__(self, records, name: str):
    self.name = name
    n = len(records)
    read = getattr(records, '__getitems__', None) or (lambda ix: [records[i] for i in ix])
    tokens, self.labels, lengths = [], np.zeros(n, np.int32), np.zeros(n, np.int64)
    for start in range(0, n, self.CHUNK):
      for i, record in enumerate(read(range(start, min(n, start + self.CHUNK))), start):
        ids = np.asarray(record['tokens'], np.uint8)
        tokens.append(ids)
        lengths[i], self.labels[i] = len(ids), int(record['label'])
    self.offsets = np.concatenate([[0], np.cumsum(lengths)])
    self.tokens = np.concatenate(tokens) if tokens else np.zeros(0, np.uint8)
    self.tokens.flags.writeable = False   # records hand out views of it

  def __len__(self):
    return len(self.labels)

  def __getitem__(self, index):
    index = int(index)
    if not 0 <= index < len(self.labels):
      raise IndexError(f'{self.name}: record {index} of {len(self.labels)}')
    return {'tokens': self.tokens[self.offsets[index]:self.offsets[index + 1]],
            'label': self.labels[index]}

  def __repr__(self):
    return f'InMemoryRecords({self.name!r}, {len(self)} records, {self.tokens.nbytes} token bytes)'


def generated_source(data_config, split: str):
  """A split of the generated ListOps (TFDS array_record; generated on first use), in memory."""
  return _generated_in_memory(*_generator_key(data_config), split)


@functools.lru_cache(maxsize=6)
def _generated_in_memory(data_dir: str, params: tuple[int, ...], split: str) -> InMemoryRecords:
  builder = _prepared_builder(data_dir, params)
  return InMemoryRecords(builder.as_data_source(split=split), f'{builder.info.full_name} {split}')


# --------------------------------------------------------------------------------------------
# Official LRA TSV files (header `Source\tTarget`), read lazily from byte offsets.

class TsvSource:
  """Random access over a `Source\tTarget` TSV: records are {'tokens', 'label'}."""

  def __init__(self, path: str):
    self.lines = base.LineFile(path, skip_header=True)
    if self.lines.header.split('\t')[:2] != ['Source', 'Target']:
      raise ValueError(f'{path}: expected the header "Source<TAB>Target", '
                       f'got {self.lines.header[:40]!r}.')

  def __len__(self):
    return len(self.lines)

  def __getitem__(self, index):
    source, target = self.lines[index].split('\t')[:2]
    return {'tokens': encode(source.split()), 'label': int(target)}

  def __repr__(self):
    return f'TsvSource({self.lines.path!r}, {len(self)} examples)'


def tsv_source(data_config, split: str):
  path = os.path.join(base.expand_path(data_config.tsv_dir), TSV_FILES[split])
  base.require_file(path, 'download the LRA release (lra_release.gz, listops-1000/) and set '
                    "config.data.tsv_dir to its folder, or use config.data.source='generated'.")
  return _cached_tsv(path)


@functools.lru_cache(maxsize=6)
def _cached_tsv(path: str) -> InMemoryRecords:
  return InMemoryRecords(TsvSource(path), path)


def write_tsv(out_dir: str, seed: int, sizes: dict[str, int], min_tokens: int = 500,
              max_tokens: int = 2000, max_depth: int = 10, max_args: int = 10,
              exclude: Sequence[np.ndarray] = ()) -> dict[str, int]:
  """Writes basic_{train,val,test}.tsv in the LRA release format (header `Source\tTarget`, trees
  with their parentheses) from `generate_splits(seed, ...)`: a held-out copy of the benchmark for
  a seed that a training run never saw, read back with config.data.source='tsv'.

  `exclude`: token-id arrays (e.g. a training split) that must not appear; returns, per split, how
  many written trees were among them (0 means the files share no tree with `exclude`).
  """
  splits = generate_splits(seed, [sizes[s] for s in TSV_FILES], min_tokens, max_tokens,
                           max_depth, max_args)
  excluded = {np.asarray(ids, np.uint8).tobytes() for ids in exclude}
  os.makedirs(out_dir, exist_ok=True)
  shared = {}
  for split, examples in zip(TSV_FILES, splits):
    with open(os.path.join(out_dir, TSV_FILES[split]), 'w') as f:
      f.write('Source\tTarget\n')
      for ids, label in examples:
        f.write(f'{decode(ids)}\t{label}\n')
    shared[split] = sum(ids.tobytes() in excluded for ids, _ in examples)
  return shared


# --------------------------------------------------------------------------------------------
# The dataset spec.

_SOURCES = {'generated': generated_source, 'tsv': tsv_source}


def _check_source(data_config) -> None:
  if data_config.source not in _SOURCES:
    raise ValueError(f'config.data.source={data_config.source!r} is not a ListOps source; '
                     f'choose one of {sorted(_SOURCES)}.')
  tokenizer = tokenizer_of(data_config)
  if tokenizer not in TOKENIZERS:
    raise ValueError(f'config.data.tokenizer={tokenizer!r} is not a ListOps tokenizer; '
                     f'choose one of {list(TOKENIZERS)}.')
  if tokenizer == 'alphanumeric' and data_config.keep_parentheses:
    raise ValueError("config.data.tokenizer='alphanumeric' drops '(' ')' but "
                     'config.data.keep_parentheses=True keeps them; set keep_parentheses=False '
                     "or tokenizer='brackets'.")


def tokenizer_of(data_config) -> str:
  """The run's tokenizer; a run saved before the option existed used 'brackets'."""
  return data_config.get('tokenizer', 'brackets')


def source(data_config, split: str):
  base.check_split(split)
  _check_source(data_config)
  return _SOURCES[data_config.source](data_config, split)


def preprocess(record, data_config, rng: Optional[np.random.Generator] = None):
  del rng  # no augmentation
  ids = np.asarray(record['tokens'])
  if tokenizer_of(data_config) == 'alphanumeric':
    ids = ids[_ALPHANUMERIC_KEPT[ids]]   # = encode_text(decode(ids), 'alphanumeric')
  elif not data_config.keep_parentheses:
    ids = ids[_NOT_PAREN[ids]]
  return {'inputs': base.fit_length(ids, data_config.max_length, data_config.too_long, 'ListOps example'),
          'targets': np.int32(record['label'])}


def info(data_config) -> base.DatasetInfo:
  _check_source(data_config)
  if data_config.source == 'generated':
    g = data_config.generator
    sizes = {'train': g.num_train, 'validation': g.num_validation, 'test': g.num_test}
  else:
    sizes = {split: len(tsv_source(data_config, split)) for split in base.SPLITS}
  return base.DatasetInfo(name='listops', task='classification', num_classes=NUM_CLASSES,
                          vocab_size=len(VOCAB), input_shape=(data_config.max_length,),
                          split_sizes=sizes)


def shapes(data_config) -> base.DatasetInfo:
  """The info without reading any file (no split sizes): what a trained run's model needs where
  its TSV files are absent (load_run, summary)."""
  _check_source(data_config)
  return base.DatasetInfo(name='listops', task='classification', num_classes=NUM_CLASSES,
                          vocab_size=len(VOCAB), input_shape=(data_config.max_length,),
                          split_sizes={})


def config():
  c = base.common_config('listops', 2048)
  c.source = 'generated'          # 'generated' (seeded, auto-prepared) | 'tsv' (LRA release files)
  c.tsv_dir = os.path.join(base.default_data_dir(), 'lra_release', 'listops-1000')
  c.keep_parentheses = False      # the official strings' '(' ')' carry nothing beyond ']'
  c.tokenizer = 'brackets'        # | 'alphanumeric': the 2020 LRA pipeline's, no brackets
  c.generator = dict(seed=0, min_tokens=500, max_tokens=2000, max_depth=10, max_args=10,
                     num_train=96000, num_validation=2000, num_test=2000)
  return c


def record(raw, data_config):
  """A user's ListOps string (with or without parentheses) or token list, as a record."""
  text = raw if isinstance(raw, str) else ' '.join(raw)
  return {'tokens': encode_text(text, tokenizer_of(data_config)), 'label': 0}


base.register_dataset('listops', base.DatasetSpec(
    info=info, source=source, preprocess=preprocess, config=config, shapes=shapes, record=record,
    generated=lambda data_config: data_config.source == 'generated'))


@errors.one_line_errors
def main(argv: Optional[Sequence[str]] = None) -> None:
  """`python -m poolformers_jax.data.listops --out_dir DIR --seed 1`: official-format TSV files."""
  parser = errors.ArgumentParser(
      prog='python -m poolformers_jax.data.listops',
      description='Write ListOps in the LRA release format (basic_{train,val,test}.tsv) from a seed.')
  parser.add_argument('--out_dir', required=True)
  parser.add_argument('--seed', type=int, required=True)
  parser.add_argument('--num_train', type=int, default=0)
  parser.add_argument('--num_validation', type=int, default=0)
  parser.add_argument('--num_test', type=int, default=2000)
  parser.add_argument('--min_tokens', type=int, default=500)
  parser.add_argument('--max_tokens', type=int, default=2000)
  parser.add_argument('--exclude_seed', type=int, default=None,
                      help='count the written trees that are in the train split of this seed '
                           '(generated with the same recipe and --exclude_num_train trees)')
  parser.add_argument('--exclude_num_train', type=int, default=96000)
  args = parser.parse_args(argv)
  exclude = ()
  if args.exclude_seed is not None:
    exclude = [ids for ids, _ in generate_splits(args.exclude_seed, [args.exclude_num_train],
                                                 args.min_tokens, args.max_tokens)[0]]
  sizes = {'train': args.num_train, 'validation': args.num_validation, 'test': args.num_test}
  shared = write_tsv(args.out_dir, args.seed, sizes, args.min_tokens, args.max_tokens,
                     exclude=exclude)
  note = (f'; trees also in seed {args.exclude_seed}\'s train split: {shared}'
          if args.exclude_seed is not None else '')
  print(f'wrote {sizes} examples to {args.out_dir}{note}')


if __name__ == '__main__':
  main()
