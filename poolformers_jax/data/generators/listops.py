"""ListOps made from a seed, as the Long Range Arena generates it (lra_benchmarks/data/listops.py):
trees, their values and official strings, the splits, the TFDS builder that stores them as
array_record, and the LRA release's TSV files.

    python -m poolformers_jax.data.generators.listops --out_dir heldout/seed1 --seed 1

The official recipe: operators MIN, MAX, MED (median, floored), SM (sum mod 10) over digits 0-9.
A node at depth < max_depth is a digit with probability 0.75, otherwise an operator with
2..max_args arguments (uniform), each one level deeper; the root has depth 1 and a node at
max_depth is always a digit. A tree is kept when min_tokens < length < max_tokens (strict, as the
official code), where length counts 2 per operator ('[OP' and ']') and 1 per digit. Examples are
unique; train/validation/test are disjoint.

Where ours differs: it draws only `random.Random(seed).random()` (Mersenne Twister; Python
guarantees this stream for a seed across versions and platforms, and it is cheaper than numpy's
scalar calls; integers are floor(u * n)), keeps the first unique trees in generation order
(train first, then validation, then test) instead of iterating a Python set, draws the trees in
chunks of 256 with one stream per (seed, chunk) so that all cores can generate them and the
result does not depend on the core count, and stops growing a tree as soon as it is too long
(the accepted trees are distributed as in the official rejection sampler; only the random stream
differs).
"""
from __future__ import annotations

import functools
import hashlib
import os
import random
import sys
from collections.abc import Sequence

import numpy as np

from poolformers_jax import errors
from poolformers_jax.data import base, generators
from poolformers_jax.data.listops_tokens import (
  END,
  MAX,
  MED,
  MIN,
  NUM_CLASSES,
  OPERATORS,
  SUM_MOD,
  TSV_FILES,
  VOCAB,
  decode,
  encode,
)

DIGIT_PROBABILITY = 0.75   # the official VALUE_P = 0.25 is the operator probability
CHUNK_TREES = 256   # accepted trees per chunk; chunk k has its own seeded stream
# config.data.generator's fields, in the order that names a prepared dataset.
FIELDS = ('seed', 'min_tokens', 'max_tokens', 'max_depth', 'max_args', 'num_train',
          'num_validation', 'num_test')


# Trees: a digit is an int, an operator node is (op, [children]).

class _TooLong(Exception):
  pass


def _below(rng: random.Random, n: int) -> int:
  """Uniform integer in [0, n) from random() alone (Python guarantees its stream for a seed)."""
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


def _chunk(args) -> list[tuple[np.ndarray, int]]:
  """The first CHUNK_TREES trees with min_tokens < length < max_tokens of chunk `index`."""
  seed, index, min_tokens, max_tokens, max_depth, max_args = args
  rng = random.Random(f'listops/{seed}/{index}')   # str seeds hash with sha512: stable everywhere
  out: list[tuple[np.ndarray, int]] = []
  attempts = 0
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


def generate_splits(seed: int, sizes: Sequence[int], min_tokens: int, max_tokens: int,
                    max_depth: int = 10, max_args: int = 10, workers: int | None = None):
  """Unique (token ids with parentheses, label) lists, one per size, disjoint, from `seed`.

  Trees come in fixed chunks, each from its own stream seeded by (seed, chunk index); chunks are
  merged in index order keeping the first copy of each tree. So the output depends on the seed
  only, not on how many processes (`workers`, default: all cores) made the chunks.
  """
  if not 0 <= min_tokens < max_tokens - 1:
    raise ValueError(f'ListOps needs 0 <= min_tokens < max_tokens - 1; got {min_tokens}, '
                     f'{max_tokens}.')
  total = sum(sizes)
  seen: set[bytes] = set()
  examples: list[tuple[np.ndarray, int]] = []
  next_chunk = 0
  while len(examples) < total:
    # Enough chunks for what is missing (plus 5 % for duplicates); more rounds if still short.
    count = -(-(total - len(examples)) * 21 // 20 // CHUNK_TREES) or 1
    tasks = [(seed, k, min_tokens, max_tokens, max_depth, max_args)
             for k in range(next_chunk, next_chunk + count)]
    next_chunk += count
    for chunk in generators.parallel_map(_chunk, tasks, workers, min_tasks=8):
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


# TFDS builder: one builder config per set of generation parameters.

@functools.lru_cache(maxsize=1)
def _builder_class():
  """Defined on first use so importing this module does not import tensorflow_datasets."""
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

  return PoolformersListops, PoolformersListopsConfig


def prepare(data_dir: str, **settings: int):
  """Generates the array_record files of the `settings` (FIELDS: config.data.generator's keys)
  under `data_dir` unless they exist; returns the builder (the same object for the same folder
  and settings)."""
  params = tuple(int(settings[k]) for k in FIELDS)
  return _prepared_builder(base.expand_path(data_dir), params)


@functools.lru_cache(maxsize=16)
def _prepared_builder(data_dir: str, params: tuple[int, ...]):
  from absl import logging
  from tensorflow_datasets.core.utils import tqdm_utils
  builder_cls, config_cls = _builder_class()
  config = config_cls(**dict(zip(FIELDS, params)))
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


# The LRA release's TSV files, for a seed a training run never saw.

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


@errors.one_line_errors
def main(argv: Sequence[str] | None = None) -> None:
  parser = errors.ArgumentParser(
      prog='python -m poolformers_jax.data.generators.listops',
      description='Write ListOps in the LRA release format (basic_{train,val,test}.tsv) from a '
      'seed.')
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
  exclude: Sequence[np.ndarray] = ()
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
