"""ListOps: evaluator, official string format, seeded generator (the same bytes as before it moved
to data/generators/), TFDS builder, TSV reader."""
import dataclasses
import hashlib
import os
import random

import numpy as np
import pytest

from poolformers_jax import data
from poolformers_jax.data import listops, listops_tokens as tokens
from poolformers_jax.data.generators import listops as generator

# The vocabulary is part of the checkpoint contract: written out here, not imported.
EXPECTED_VOCAB = ['<pad>', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9',
                  '[MIN', '[MAX', '[MED', '[SM', ']', '(', ')']


def reference_value(text):
  """Independent evaluator: a stack machine over whitespace tokens (parentheses ignored)."""
  stack = []
  for token in text.split():
    if token in '()':
      continue
    if token == ']':
      args = []
      while not isinstance(stack[-1], str):
        args.append(stack.pop())
      op = stack.pop()
      args = sorted(args)
      value = {'[MIN': args[0], '[MAX': args[-1], '[SM': sum(args) % 10,
               # floored median: mean of the two middle values, rounded down
               '[MED': (args[(len(args) - 1) // 2] + args[len(args) // 2]) // 2}[op]
      stack.append(value)
    elif token.startswith('['):
      stack.append(token)
    else:
      stack.append(int(token))
  assert len(stack) == 1
  return stack[0]


@pytest.mark.parametrize('tree, value', [
    (('[MAX', [2, 9, ('[MIN', [4, 7]), 0]), 9),
    (('[SM', [5, 6]), 1),
    (('[MED', [1, 2, 3, 4]), 2),
    (('[MED', [3, 9, 1]), 3),
    (('[MIN', [('[SM', [9, 9, 9]), ('[MAX', [1, 8])]), 7),
    (('[MED', [('[MED', [0, 1]), 5, ('[SM', [4, 4]), 9]), 6),
    (7, 7),
])
def test_evaluate_hand_written_trees(tree, value):
  assert generator.evaluate(tree) == value
  assert reference_value(' '.join(generator.to_tokens(tree, parentheses=False))) == value


def test_vocabulary_is_fixed():
  assert list(tokens.VOCAB) == EXPECTED_VOCAB
  assert tokens.VOCAB[0] == '<pad>'  # id 0 is padding; digit '0' is a real token


def test_official_string_format():
  tree = ('[MAX', [2, 9])
  assert ' '.join(generator.to_tokens(tree)) == '( ( ( [MAX 2 ) 9 ) ] )'
  nested = ('[MIN', [3, ('[SM', [1, 2]), 5])
  assert ' '.join(generator.to_tokens(nested)) == (
      '( ( ( ( [MIN 3 ) ( ( ( [SM 1 ) 2 ) ] ) ) 5 ) ] )')
  assert ' '.join(generator.to_tokens(nested, parentheses=False)) == '[MIN 3 [SM 1 2 ] 5 ]'


def test_generator_recipe_and_determinism():
  sizes = [150, 20, 25]
  splits = generator.generate_splits(3, sizes, min_tokens=20, max_tokens=80, max_depth=6)
  again = generator.generate_splits(3, sizes, min_tokens=20, max_tokens=80, max_depth=6)
  other = generator.generate_splits(4, sizes, min_tokens=20, max_tokens=80, max_depth=6)
  assert [len(s) for s in splits] == sizes
  flat = [(ids.tobytes(), label) for split in splits for ids, label in split]
  assert flat == [(ids.tobytes(), label) for split in again for ids, label in split]
  assert flat != [(ids.tobytes(), label) for split in other for ids, label in split]
  assert len({key for key, _ in flat}) == sum(sizes)  # unique, so the splits are disjoint
  arities, depths = [], []
  for key, label in flat:
    text = tokens.decode(np.frombuffer(key, np.uint8))
    bare = [t for t in text.split() if t not in '()']
    assert 20 < len(bare) < 80  # official length: 2 per operator + 1 per digit, strict bounds
    assert label == reference_value(text)
    depth, max_depth, counts = 0, 0, []
    for t in bare:  # arity of every operator and the depth of every digit
      if t.startswith('['):
        depth += 1
        counts.append(0)
      elif t == ']':
        depth -= 1
        arities.append(counts.pop())
      else:
        if counts:
          counts[-1] += 1
        max_depth = max(max_depth, depth + 1)
      if t == ']' and counts:
        counts[-1] += 1
    depths.append(max_depth)
  assert min(arities) >= 2 and max(arities) <= 10 and len(set(arities)) == 9
  assert max(depths) <= 6
  labels = [label for _, label in flat]
  assert set(labels) <= set(range(10)) and len(set(labels)) >= 5


def test_generated_tree_depth_and_digit_probability():
  rng = random.Random(0)
  roots_digit = sum(isinstance(generator.generate_tree(rng, 10, 10)[0], int) for _ in range(4000))
  assert abs(roots_digit / 4000 - 0.75) < 0.03


# Generated ListOps is the data of every ListOps result, so its bytes are pinned: these hashes were
# computed with the generator before it moved out of data/listops.py (commit 8285ec7).
SPLITS_SHA256 = 'c4968007392dbc0821b9c513e033d978b5b69d98c219eed665e1e50bed7ea485'
TSV_SHA256 = 'ffa559a35310759d2dc2e9a46d6b39841eb2f1e353fd642124c41e71d3bb7cc9'
FIXTURE_RECORDS_SHA256 = 'abc2561e0d0064dbc44a9842bfd185e64c25988a1e3cc85d08267e8d55ccd779'


def _examples_sha256(examples):
  digest = hashlib.sha256()
  for ids, label in examples:
    digest.update(np.asarray(ids, np.uint8).tobytes())
    digest.update(bytes([int(label)]))
  return digest.hexdigest()


def test_generated_bytes_are_those_of_the_generator_before_the_move(tmp_path, small_listops):
  """The trees of a seed, the TSV files written from them, and the records the TFDS builder
  prepared for the shared fixture (seed 0, 60/11/13 trees of 10 < length < 60)."""
  splits = generator.generate_splits(7, [300, 40, 50], 20, 120, workers=1)
  assert _examples_sha256([e for split in splits for e in split]) == SPLITS_SHA256
  generator.write_tsv(str(tmp_path), seed=5, sizes={'train': 30, 'validation': 10, 'test': 20},
                      min_tokens=8, max_tokens=50)
  digest = hashlib.sha256()
  for name in sorted(os.listdir(tmp_path)):
    digest.update(name.encode())
    digest.update((tmp_path / name).read_bytes())
  assert digest.hexdigest() == TSV_SHA256
  settings = data.settings(small_listops.data)
  sources = [listops.source(settings, split) for split in ('train', 'validation', 'test')]
  records = [source[i] for source in sources for i in range(len(source))]
  assert len(records) == 84
  assert _examples_sha256([(r['tokens'], r['label']) for r in records]) == FIXTURE_RECORDS_SHA256


def _record_files(root):
  out = {}
  for dirpath, _, names in os.walk(root):
    for name in names:
      if 'array_record' in name:
        with open(os.path.join(dirpath, name), 'rb') as f:
          out[os.path.relpath(os.path.join(dirpath, name), root)] = f.read()
  return out


def test_tfds_builder_same_seed_byte_identical(tmp_path, make_listops_config):
  a = make_listops_config(tmp_path / 'a', seed=5, num_train=40, num_validation=7, num_test=9)
  b = make_listops_config(tmp_path / 'b', seed=5, num_train=40, num_validation=7, num_test=9)
  c = make_listops_config(tmp_path / 'b', seed=6, num_train=40, num_validation=7, num_test=9)
  for config in (a, b, c):
    generator.prepare(config.data.data_dir, **config.data.generator)
  files_a, files_b = _record_files(tmp_path / 'a'), _record_files(tmp_path / 'b')
  assert len(files_a) == 3 and set(files_a) < set(files_b)  # seed 6 got its own folder
  for name, content in files_a.items():
    assert content == files_b[name]
  assert len(files_b) == 6
  # Records: label = value of the tree; splits disjoint; sizes as configured.
  seen = set()
  for split, size in (('train', 40), ('validation', 7), ('test', 9)):
    source = listops.source(data.settings(a.data), split)
    assert len(source) == size
    for i in range(size):
      record = source[i]
      text = ' '.join(EXPECTED_VOCAB[t] for t in record['tokens'])
      assert record['label'] == reference_value(text)
      seen.add(text)
  assert len(seen) == 56


def _write_tsv(path, rows):
  with open(path, 'w') as f:
    f.write('Source\tTarget\n')
    for source, target in rows:
      f.write(f'{source}\t{target}\n')


def test_tsv_reader_uses_the_same_vocabulary(tmp_path, small_listops):
  rows = [('( ( ( [MAX 2 ) 9 ) ] )', 9), ('( ( ( [SM 5 ) 6 ) ] )', 1),
          ('( ( ( ( [MIN 3 ) ( ( ( [SM 1 ) 2 ) ] ) ) 5 ) ] )', 3)]
  for name in ('basic_train.tsv', 'basic_val.tsv', 'basic_test.tsv'):
    _write_tsv(tmp_path / name, rows)
  config = small_listops.copy_and_resolve_references()
  config.data.source, config.data.tsv_dir, config.data.max_length = 'tsv', str(tmp_path), 12
  info = data.get_dataset_info(data.settings(config.data))
  assert info.split_sizes == {'train': 3, 'validation': 3, 'test': 3}
  batch = next(iter(data.make_eval_iterator(data.settings(config.data), 'validation',
                                            batch_size=4)))
  # Parentheses dropped by default; ids written out from EXPECTED_VOCAB.
  expected = [[12, 3, 10, 15], [14, 6, 7, 15], [11, 4, 14, 2, 3, 15, 6, 15]]
  for row, ids in enumerate(expected):
    np.testing.assert_array_equal(batch['inputs'][row], ids + [0] * (12 - len(ids)))
  np.testing.assert_array_equal(batch['targets'][:3], [9, 1, 3])
  np.testing.assert_array_equal(batch['mask'], [True, True, True, False])
  config.data.keep_parentheses = True
  batch = next(iter(data.make_eval_iterator(data.settings(config.data), 'test', batch_size=4)))
  np.testing.assert_array_equal(batch['inputs'][0, :10], [16, 16, 16, 12, 3, 17, 10, 17, 15, 17])


def test_generated_and_tsv_sources_agree(tmp_path, small_listops):
  """The generated split written as an official TSV reads back to the same batches."""
  config = small_listops.copy_and_resolve_references()
  source = listops.source(data.settings(config.data), 'test')
  rows = [(' '.join(EXPECTED_VOCAB[t] for t in source[i]['tokens']), source[i]['label'])
          for i in range(len(source))]
  for name in ('basic_train.tsv', 'basic_val.tsv', 'basic_test.tsv'):
    _write_tsv(tmp_path / name, rows)
  generated = list(data.make_eval_iterator(data.settings(config.data), 'test', batch_size=4))
  config.data.source, config.data.tsv_dir = 'tsv', str(tmp_path)
  from_tsv = list(data.make_eval_iterator(data.settings(config.data), 'test', batch_size=4))
  assert len(generated) == len(from_tsv) == 4
  for g, t in zip(generated, from_tsv):
    for key in ('inputs', 'targets', 'mask'):
      np.testing.assert_array_equal(g[key], t[key])


def test_missing_tsv_is_one_clear_line(tmp_path, small_listops):
  config = small_listops.copy_and_resolve_references()
  config.data.source, config.data.tsv_dir = 'tsv', str(tmp_path / 'nowhere')
  with pytest.raises(data.DataNotFoundError) as error:
    data.get_dataset_info(data.settings(config.data))
  message = str(error.value)
  assert '\n' not in message
  assert os.path.join(str(tmp_path / 'nowhere'), 'basic_train.tsv') in message
  assert 'tsv_dir' in message


def test_too_long_truncates_or_raises(small_listops):
  config = small_listops.copy_and_resolve_references()
  config.data.max_length = 8
  full = listops.source(data.settings(config.data), 'validation')[0]['tokens']
  bare = full[~np.isin(full, [16, 17])]
  batch = next(iter(data.make_eval_iterator(data.settings(config.data), 'validation',
                                            batch_size=2)))
  np.testing.assert_array_equal(batch['inputs'][0], bare[:8])
  config.data.too_long = 'error'
  with pytest.raises(ValueError, match='max_length=8'):
    next(iter(data.make_eval_iterator(data.settings(config.data), 'validation', batch_size=2)))


def test_write_tsv_is_the_release_format_and_reads_back(tmp_path):
  """The held-out writer: LRA's header and bracketed strings, labels an independent evaluator
  agrees with, the same trees as the generator, and the overlap count against `exclude`."""
  sizes = {'train': 3, 'validation': 2, 'test': 7}
  shared = generator.write_tsv(str(tmp_path), seed=5, sizes=sizes, min_tokens=8, max_tokens=30)
  assert shared == {'train': 0, 'validation': 0, 'test': 0}
  expected = generator.generate_splits(5, [3, 2, 7], 8, 30)
  for (split, name), examples in zip(tokens.TSV_FILES.items(), expected):
    lines = (tmp_path / name).read_text().splitlines()
    assert lines[0] == 'Source\tTarget' and len(lines) == 1 + sizes[split]
    source = listops.TsvSource(str(tmp_path / name))
    for row, line, (ids, label) in zip(range(len(source)), lines[1:], examples):
      text, target = line.split('\t')
      assert text.split()[0] == '(' and int(target) == label == reference_value(text)
      np.testing.assert_array_equal(source[row]['tokens'], ids)
  # Written again, excluding its own test split: every test tree is counted, nothing else.
  again = generator.write_tsv(str(tmp_path / 'again'), seed=5, sizes=sizes, min_tokens=8,
                            max_tokens=30, exclude=[ids for ids, _ in expected[2]])
  assert again == {'train': 0, 'validation': 0, 'test': 7}


def test_in_memory_records_equal_the_tfds_source(tmp_path, make_listops_config):
  """The split held in memory hands out the very records TFDS reads (a chunk boundary inside),
  as read-only views, and refuses an index outside it."""
  config = make_listops_config(tmp_path, seed=3, num_train=50, num_validation=5, num_test=5)
  tfds_source = generator.prepare(config.data.data_dir, **config.data.generator).as_data_source(
      split='train')
  old_chunk, listops.InMemoryRecords.CHUNK = listops.InMemoryRecords.CHUNK, 16
  try:
    held = listops.InMemoryRecords(tfds_source, 'train')
  finally:
    listops.InMemoryRecords.CHUNK = old_chunk
  assert len(held) == len(tfds_source) == 50
  for i in range(50):
    np.testing.assert_array_equal(held[i]['tokens'], tfds_source[i]['tokens'])
    assert held[i]['label'] == tfds_source[i]['label']
  assert isinstance(listops.source(data.settings(config.data), 'train'), listops.InMemoryRecords)
  with pytest.raises(ValueError):
    held[7]['tokens'][0] = 1
  with pytest.raises(IndexError):
    held[50]


def test_preprocess_drops_parentheses_and_pads(small_listops):
  """The table lookup and the zero fill give what np.isin and np.pad gave."""
  record = {'tokens': tokens.encode('( [MAX 2 ( [MIN 4 7 ] ) 0 ] )'.split()), 'label': 7}
  settings = data.settings(small_listops.data)
  out = listops.preprocess(record, settings)
  ids = np.asarray(record['tokens'])
  kept = ids[~np.isin(ids, tokens.PAREN_IDS)]
  np.testing.assert_array_equal(out['inputs'],
                                np.pad(kept.astype(np.int32), (0, settings.max_length - len(kept))))
  assert out['inputs'].dtype == np.int32 and out['targets'] == 7


# --------------------------------------------------------------------------------------------
# config.data.tokenizer: 'brackets' (default) and 'alphanumeric' (the 2020 LRA pipeline).

# sha256 of the default's preprocessed ids of generate_splits(0, [40], 10, 60) at max_length 64,
# computed with listops.py as it was before the tokenizer option (commit 964c730).
DEFAULT_IDS_SHA256 = 'c72f92a7b57f566669efc02fe4da5ae84c907a8833cc852a3452e136fc77564e'


def word_runs(text):
  """tfds.deprecated.text.Tokenizer's rule restated without a regex: maximal runs of characters
  that are alphanumeric (str.isalnum) or '_' (Python's definition of the Unicode \\w)."""
  runs, current = [], ''
  for ch in text:
    if ch.isalnum() or ch == '_':
      current += ch
    elif current:
      runs.append(current)
      current = ''
  return runs + [current] if current else runs


def test_default_tokenizer_ids_are_todays():
  import hashlib
  config = listops.ListOpsSettings(max_length=64)
  assert config.tokenizer == 'brackets'
  split, = generator.generate_splits(0, [40], 10, 60, workers=1)
  ids = np.stack([listops.preprocess({'tokens': t, 'label': y}, config)['inputs']
                  for t, y in split])
  assert ids.dtype == np.int32 and ids.shape == (40, 64)
  assert hashlib.sha256(ids.tobytes()).hexdigest() == DEFAULT_IDS_SHA256


@pytest.mark.parametrize('text', ['a_b\u00e9 [X,y]  9\t\u0663x', '__', '[ ] ( )', '',
                                  'M\u00c4X-2..9'])
def test_alphanumeric_rule_on_other_strings(text):
  assert tokens.alphanumeric_tokens(text) == word_runs(text)


def test_alphanumeric_tokenizer_on_generated_trees():
  """On generated trees (official strings, with parentheses), the id-table path of preprocess
  equals the tokenizer's rule applied to the string, and both equal the rule restated."""
  config = listops.ListOpsSettings(tokenizer='alphanumeric', max_length=200)
  # Ids written out from EXPECTED_VOCAB: an operator run takes the id of its '[OP'.
  to_id = {'MIN': 11, 'MAX': 12, 'MED': 13, 'SM': 14, **{str(d): d + 1 for d in range(10)}}
  np.testing.assert_array_equal(tokens.encode_text('[MAX 2 9 [MIN 4 7 ] 0 ]', 'alphanumeric'),
                                [12, 3, 10, 11, 5, 8, 1])
  rng = random.Random(5)
  for _ in range(30):
    tree, _ = generator.generate_tree(rng, max_depth=5, max_args=5)
    text = ' '.join(generator.to_tokens(tree))   # `( ( ( [MAX 2 ) 9 ) ] )`
    expected = [to_id[t] for t in word_runs(text)]
    assert tokens.alphanumeric_tokens(text) == word_runs(text)
    np.testing.assert_array_equal(tokens.encode_text(text, 'alphanumeric'), expected)
    out = listops.preprocess({'tokens': tokens.encode(text.split()), 'label': 0}, config)
    np.testing.assert_array_equal(out['inputs'], expected + [0] * (200 - len(expected)))


def test_alphanumeric_tokenizer_on_official_tsv(tmp_path, small_listops):
  """The TSV source: each batch row is the rule applied to the file's own line."""
  generator.write_tsv(str(tmp_path), seed=3, sizes={'train': 4, 'validation': 4, 'test': 6},
                    min_tokens=10, max_tokens=40)
  config = small_listops.copy_and_resolve_references()
  config.data.update(source='tsv', tsv_dir=str(tmp_path), tokenizer='alphanumeric', max_length=40)
  to_id = {'MIN': 11, 'MAX': 12, 'MED': 13, 'SM': 14, **{str(d): d + 1 for d in range(10)}}
  lines = (tmp_path / 'basic_test.tsv').read_text().splitlines()[1:]
  batch = next(iter(data.make_eval_iterator(data.settings(config.data), 'test', batch_size=8)))
  for row, line in enumerate(lines):
    source, target = line.split('\t')
    ids = [to_id[t] for t in word_runs(source)]
    np.testing.assert_array_equal(batch['inputs'][row], ids + [0] * (40 - len(ids)))
    assert batch['targets'][row] == int(target)


@pytest.mark.parametrize('change, words', [
    ({'tokenizer': 'words'}, ['tokenizer', 'brackets', 'alphanumeric']),
    ({'tokenizer': 'alphanumeric', 'keep_parentheses': True}, ['keep_parentheses', 'tokenizer']),
])
def test_bad_tokenizer_settings_are_one_line(small_listops, change, words):
  config = small_listops.copy_and_resolve_references()
  config.data.update(**change)
  with pytest.raises(ValueError) as error:
    data.get_dataset_info(data.settings(config.data))
  assert '\n' not in str(error.value) and all(w in str(error.value) for w in words)


def test_load_run_reads_raw_strings_with_the_runs_tokenizer():
  """ListOps's declared `record` (what load_run reads): an alphanumeric run reads the official
  string, the bracketed one and the bare runs alike; a brackets run keeps ']'."""
  _listops_record = listops.record
  config = listops.ListOpsSettings(max_length=12)
  ids = lambda raw: listops.preprocess(_listops_record(raw, config), config)['inputs'][:8].tolist()
  assert ids('[MAX 2 9 [MIN 4 7 ] 0 ]') == [12, 3, 10, 11, 5, 8, 15, 1]
  config = dataclasses.replace(config, tokenizer='alphanumeric')
  for raw in ('[MAX 2 9 [MIN 4 7 ] 0 ]', 'MAX 2 9 MIN 4 7 0', '( ( [MAX 2 ) 9 ( [MIN 4 ) 7 ] ) 0 ]',
              ['[MAX', '2', '9', '[MIN', '4', '7', ']', '0', ']']):
    assert ids(raw) == [12, 3, 10, 11, 5, 8, 1, 0]
  with pytest.raises(ValueError, match="'ADD' is not a ListOps operator"):
    _listops_record('[ADD 1 2 ]', config)
