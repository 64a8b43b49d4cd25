"""grain pipelines: exact resume, global batches independent of the process count, eval coverage
with padding and mask."""
import collections
import threading

import grain
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from poolformers_jax import data
from poolformers_jax.data import listops, pipeline


def _take(iterator, n):
  return [next(iterator) for _ in range(n)]


def _key(inputs_row):
  return np.asarray(inputs_row).tobytes()


def test_train_iterator_resumes_exactly(small_listops):
  it = data.make_train_iterator(data.settings(small_listops.data),
                                batch_size=small_listops.batch_size, seed=1)
  _take(it, 3)
  state = it.get_state()
  expected = _take(it, 12)  # 12 batches of 8 > 60 examples: crosses an epoch boundary
  fresh = data.make_train_iterator(data.settings(small_listops.data),
                                   batch_size=small_listops.batch_size, seed=1)
  fresh.set_state(state)
  for want, got in zip(expected, _take(fresh, 12)):
    for key in ('inputs', 'targets'):
      np.testing.assert_array_equal(want[key], got[key])


def test_train_iterator_resumes_through_grain_checkpoint_handler(tmp_path, small_listops):
  it = data.make_train_iterator(data.settings(small_listops.data),
                                batch_size=small_listops.batch_size, seed=2)
  _take(it, 2)
  handler = grain.checkpoint.CheckpointHandler()
  (tmp_path / 'ckpt').mkdir()
  handler.save(tmp_path / 'ckpt', args=grain.checkpoint.CheckpointSave(it))
  expected = _take(it, 3)
  fresh = data.make_train_iterator(data.settings(small_listops.data),
                                   batch_size=small_listops.batch_size, seed=2)
  handler.restore(tmp_path / 'ckpt', args=grain.checkpoint.CheckpointRestore(fresh))
  for want, got in zip(expected, _take(fresh, 3)):
    np.testing.assert_array_equal(want['inputs'], got['inputs'])


def test_train_epochs_are_permutations_reshuffled_and_seeded(small_listops):
  config = small_listops.copy_and_resolve_references()
  config.batch_size = 6  # 60 examples = 10 batches per epoch
  source = listops.source(data.settings(config.data), 'train')
  batches = _take(data.make_train_iterator(data.settings(config.data),
                                           batch_size=config.batch_size, seed=0), 20)
  epochs = [np.concatenate([b['inputs'] for b in batches[:10]]),
            np.concatenate([b['inputs'] for b in batches[10:]])]
  all_examples = sorted(_key(listops.preprocess(source[i], data.settings(config.data))['inputs'])
                        for i in range(len(source)))
  for epoch in epochs:
    assert sorted(_key(row) for row in epoch) == all_examples
  assert [_key(r) for r in epochs[0]] != [_key(r) for r in epochs[1]]
  other_seed = _take(data.make_train_iterator(data.settings(config.data),
                                              batch_size=config.batch_size, seed=1), 1)[0]
  assert not np.array_equal(other_seed['inputs'], batches[0]['inputs'])
  # Targets stay attached to their inputs.
  label_of = {_key(listops.preprocess(source[i],
                                      data.settings(config.data))['inputs']): source[i]['label']
              for i in range(len(source))}
  for b in batches:
    assert [label_of[_key(r)] for r in b['inputs']] == list(b['targets'])
  assert batches[0]['inputs'].dtype == np.int32 and batches[0]['targets'].dtype == np.int32


def test_train_shards_are_disjoint_across_processes(small_listops):
  config = small_listops.copy_and_resolve_references()
  config.batch_size = 8
  seen = []
  for process_index in range(2):
    it = data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size, seed=0,
                                  process_index=process_index, process_count=2)
    batches = _take(it, 7)  # 7 global batches of 8 cover 56 of the 60 examples
    assert batches[0]['inputs'].shape == (4, config.data.max_length)
    seen.append({_key(r) for b in batches for r in b['inputs']})
  assert not seen[0] & seen[1]


@pytest.mark.parametrize('split, size, process_count, batch_size', [
    ('validation', 11, 2, 4), ('test', 13, 2, 6), ('test', 13, 3, 3), ('validation', 11, 1, 4)])
def test_eval_every_example_exactly_once(small_listops, split, size, process_count, batch_size):
  source = listops.source(data.settings(small_listops.data), split)
  assert len(source) == size
  expected = collections.Counter(
      _key(listops.preprocess(source[i],
                              data.settings(small_listops.data))['inputs']) for i in range(size))
  got = collections.Counter()
  num_batches = []
  for process_index in range(process_count):
    batches = list(data.make_eval_iterator(data.settings(small_listops.data), split,
                                           batch_size=batch_size,
                                           process_index=process_index,
                                           process_count=process_count))
    num_batches.append(len(batches))
    for b in batches:
      assert b['inputs'].shape == (batch_size // process_count, small_listops.data.max_length)
      assert b['mask'].dtype == np.bool_
      assert not b['inputs'][~b['mask']].any()  # padding examples are all zeros
      got.update(_key(r) for r in b['inputs'][b['mask']])
  assert got == expected
  per_process = batch_size // process_count
  assert len(set(num_batches)) == 1  # every process runs the same number of steps
  per_process_examples = -(-size // process_count)
  assert num_batches[0] == -(-per_process_examples // per_process)
  assert num_batches[0] == data.eval_num_batches(size, batch_size, process_count)


def test_dataset_info_and_configs(small_listops):
  info = data.get_dataset_info(data.settings(small_listops.data))
  assert info == data.DatasetInfo(
      name='listops', task='classification', num_classes=10, vocab_size=18,
      input_shape=(64,), split_sizes={'train': 60, 'validation': 11, 'test': 13})
  for name in ('listops', 'lra_text', 'lra_retrieval', 'lra_image', 'lra_pathfinder', 'cifar10',
               'cifar100', 'imagenet2012', 'enwik8', 'text8'):
    assert data.get_data_config(name).name == name
    assert name in data.DATASETS
  with pytest.raises(ValueError, match='choose one of'):
    data.get_data_config('mnist')


def test_batch_size_must_divide_by_process_count(small_listops):
  config = small_listops.copy_and_resolve_references()
  config.batch_size = 9
  with pytest.raises(ValueError, match='not divisible by process_count=2'):
    data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size, seed=0,
                             process_index=0, process_count=2)


def _global_batches_by_process(config, process_count, steps):
  """Each process's `steps` batches, joined row-wise: the global batches they made together."""
  settings = data.settings(config.data)
  per_process = [_take(data.make_train_iterator(settings, batch_size=config.batch_size, seed=5,
                                                process_index=p,
                                                process_count=process_count), steps)
                 for p in range(process_count)]
  return [{key: np.concatenate([batches[step][key] for batches in per_process])
           for key in ('inputs', 'targets')} for step in range(steps)]


@pytest.mark.parametrize('process_count', [2, 4])
def test_global_batches_do_not_depend_on_process_count(small_listops, process_count):
  # 10 steps of 8 > 60 examples: crosses an epoch boundary (a new permutation).
  expected = _global_batches_by_process(small_listops, 1, 10)
  got = _global_batches_by_process(small_listops, process_count, 10)
  for want, have in zip(expected, got):
    for key in ('inputs', 'targets'):
      np.testing.assert_array_equal(want[key], have[key])


def test_augmented_global_batches_do_not_depend_on_process_count(tmp_path):
  """Augmentation (CIFAR random crop + flip) draws from the example's global position."""
  config = ml_collections.ConfigDict(dict(seed=0, batch_size=4))
  config.data = data.get_data_config('cifar10')
  config.data.data_dir = str(tmp_path)
  with tfds.testing.mock_data(num_examples=6):
    # 4 steps of 4 > 6 examples: two epoch boundaries.
    expected = _global_batches_by_process(config, 1, 4)
    for process_count in (2, 4):
      for want, have in zip(expected, _global_batches_by_process(config, process_count, 4)):
        np.testing.assert_array_equal(want['inputs'], have['inputs'])


def test_each_process_preprocesses_only_its_own_rows(small_listops, monkeypatch):
  calls = []
  real_call = pipeline.Preprocess.__call__

  test_thread = threading.get_ident()

  def counting_call(self, record, rng=None):
    # With read_threads=0 this test's iterator preprocesses in the test's own thread; prefetch
    # threads of iterators left by earlier tests in the same worker must not be counted.
    if threading.get_ident() == test_thread:
      calls.append(record)
    return real_call(self, record, rng)

  monkeypatch.setattr(pipeline.Preprocess, '__call__', counting_call)
  config = small_listops.copy_and_resolve_references()
  config.data.read_threads = 0  # no threads: grain reads at most one batch ahead
  rows = config.batch_size // 4
  _take(data.make_train_iterator(data.settings(config.data), batch_size=config.batch_size, seed=0,
                                 process_index=1, process_count=4), 3)
  # Decoding the global batches and then slicing would take 3 * 8 = 24 calls.
  assert 3 * rows <= len(calls) <= 4 * rows


def test_eval_stream_cycles_reshuffled_epochs_and_resumes(small_listops):
  """The reference's endless dev LRADataset: shuffled, reshuffled when exhausted, batches that
  cross epochs; every example real; grain state resumes it exactly."""
  source = listops.source(data.settings(small_listops.data), 'validation')
  keys = sorted(_key(listops.preprocess(source[i], data.settings(small_listops.data))['inputs'])
                for i in range(len(source)))
  stream = data.make_eval_stream(data.settings(small_listops.data), 'validation', batch_size=4,
                                 seed=3)
  batches = _take(stream, 11)                # 44 examples = 4 epochs of 11
  rows = np.concatenate([b['inputs'] for b in batches])
  assert all(b['mask'].all() and b['mask'].shape == (4,) for b in batches)
  epochs = [[_key(r) for r in rows[i * 11:(i + 1) * 11]] for i in range(4)]
  for epoch in epochs:
    assert sorted(epoch) == keys
  assert len({tuple(e) for e in epochs}) == 4      # each epoch in a new order
  again = data.make_eval_stream(data.settings(small_listops.data), 'validation', batch_size=4,
                                seed=3)
  _take(again, 2)
  position = data.Streams(validation=again).get_state()
  expected = _take(again, 5)
  both = data.Streams(train=data.make_train_iterator(data.settings(small_listops.data),
                                                     batch_size=small_listops.batch_size, seed=0),
                      validation=data.make_eval_stream(data.settings(small_listops.data),
                                                       'validation',
                                                       batch_size=4, seed=3))
  both.set_state({'train': both.iterators['train'].get_state(), 'validation': position})
  for want, got in zip(expected, _take(both.iterators['validation'], 5)):
    np.testing.assert_array_equal(want['inputs'], got['inputs'])
  # Two processes: the rows of the same global batches.
  halves = [_take(data.make_eval_stream(data.settings(small_listops.data), 'validation',
                                        batch_size=4, seed=3,
                                        process_index=p, process_count=2), 3) for p in range(2)]
  for i in range(3):
    np.testing.assert_array_equal(
        np.concatenate([halves[0][i]['inputs'], halves[1][i]['inputs']]), batches[i]['inputs'])


def test_eval_drop_last_keeps_the_first_full_batches(small_listops):
  """drop_last=b: the first N - N % b examples of the split, like DataLoader(drop_last=True)."""
  source = listops.source(data.settings(small_listops.data), 'test')          # 13 examples
  batches = list(data.make_eval_iterator(data.settings(small_listops.data), 'test', batch_size=4,
                                         drop_last=4))
  real = np.concatenate([b['inputs'][b['mask']] for b in batches])
  expected = [listops.preprocess(source[i],
                                 data.settings(small_listops.data))['inputs'] for i in range(12)]
  np.testing.assert_array_equal(real, np.stack(expected))
  with pytest.raises(ValueError, match='fewer examples than drop_last=16'):
    list(data.make_eval_iterator(data.settings(small_listops.data), 'test', batch_size=4,
                                 drop_last=16))
