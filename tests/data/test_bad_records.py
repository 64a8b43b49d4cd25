"""A damaged or truncated data file, made on generated data (issue #65 item 2): a TSV cut
mid-line or with bad rows, an enwik8 / text8 zip whose CRC fails or that is cut short, a TFDS
array_record shard cut short or swapped, a PNG that does not decode. Each ends in one line naming
the file and the record (errors.DataFault, exit code 3) at the first read; with
config.data.skip_bad_records the bad records are skipped instead, and counted."""
import os
import shutil
import zipfile

import numpy as np
import pytest
from PIL import Image

from poolformers_jax import data, errors
from poolformers_jax.data import bad_records, base, listops, prepare, text_lm
from poolformers_jax.data.generators import listops as generator

SKIP_HINT = 'or set --config.data.skip_bad_records=True to skip such records (counted)'


def _damage_lines(path, damages):
  """Rewrites text file `path` with line i (1-based) replaced by damages[i](line); a damage that
  returns None cuts the file there, mid-line."""
  lines = open(path).read().splitlines(keepends=True)
  out = []
  for number, line in enumerate(lines, 1):
    damaged = damages.get(number, lambda text: text)(line)
    if damaged is None:
      out.append(line[:len(line) // 2])
      break
    out.append(damaged)
  with open(path, 'w') as f:
    f.write(''.join(out))
  return len(lines)


def _skipped(path):
  return bad_records.skipped().get(str(path), 0)


def _assert_skips_to(config, path, good, make_data_config, *, skipped, rows):
  """With skip_bad_records, the ListOps train split of `config` counts `skipped` more bad lines
  of `path` and holds exactly rows `rows` of the undamaged release in folder `good`."""
  before = _skipped(path)
  config.data.skip_bad_records = True
  kept = listops.source(data.settings(config.data), 'train')
  assert _skipped(path) - before == skipped
  reference = listops.source(
      data.settings(make_data_config('listops', source='tsv', tsv_dir=str(good)).data), 'train')
  assert len(kept) == len(rows)
  for got, i in zip(kept, rows):
    np.testing.assert_array_equal(got['tokens'], reference[i]['tokens'])
    assert got['label'] == reference[i]['label']


def test_listops_tsv_cut_mid_line_or_bad_rows_refused_at_open_or_skipped_and_counted(
    tmp_path, make_data_config):
  """The release's train file with a non-integer label (line 4), a row whose tab is gone
  (line 7) and its last line cut in half: reading the split refuses line 4 in one line; with
  skip_bad_records the split holds exactly the other rows, as the undamaged file reads them."""
  good, bad = tmp_path / 'good', tmp_path / 'bad'
  generator.write_tsv(str(good), seed=5, sizes={'train': 12, 'validation': 4, 'test': 4},
                      min_tokens=8, max_tokens=30)
  shutil.copytree(good, bad)
  path = bad / 'basic_train.tsv'
  lines = _damage_lines(path, {4: lambda line: line.rsplit('\t', 1)[0] + '\tx\n',
                               7: lambda line: line.replace('\t', ' '), 13: lambda line: None})
  assert lines == 13                                     # header + 12 rows; rows 3, 6, 12 bad
  config = make_data_config('listops', source='tsv', tsv_dir=str(bad), max_length=32)
  with pytest.raises(bad_records.BadRecord) as refused:
    data.get_dataset_info(data.settings(config.data))
  assert str(refused.value) == (
      f"{path}:4: the label 'x' is not a class 0-9; download the LRA release again "
      f'(lra_release.gz, listops-1000/), {SKIP_HINT}')
  assert isinstance(refused.value, errors.MachineFault)

  good_rows = [i for i in range(12) if i not in (2, 5, 11)]
  _assert_skips_to(config, path, good, make_data_config, skipped=3, rows=good_rows)


def test_listops_tsv_row_cut_short_names_its_line(tmp_path, make_data_config):
  """A row cut after its tree (no tab, no label) is refused with its field count."""
  generator.write_tsv(str(tmp_path), seed=5, sizes={'train': 4, 'validation': 4, 'test': 4},
                      min_tokens=8, max_tokens=30)
  path = tmp_path / 'basic_val.tsv'
  _damage_lines(path, {3: lambda line: line.split('\t')[0] + '\n'})
  config = make_data_config('listops', source='tsv', tsv_dir=str(tmp_path), max_length=32)
  with pytest.raises(bad_records.BadRecord, match=(
      f'^{path}:3: 1 tab-separated fields where a ListOps line has 2 \\(Source, Target\\): the '
      'line is cut short or damaged; ')):
    listops.source(data.settings(config.data), 'validation')


def test_a_damaged_file_is_one_line_with_exit_code_3(tmp_path, capsys, make_data_config):
  generator.write_tsv(str(tmp_path), seed=5, sizes={'train': 4, 'validation': 4, 'test': 4},
                      min_tokens=8, max_tokens=30)
  path = tmp_path / 'basic_train.tsv'
  _damage_lines(path, {2: lambda line: None})
  config = make_data_config('listops', source='tsv', tsv_dir=str(tmp_path))
  with pytest.raises(SystemExit) as exit_:
    errors.one_line_errors(data.get_dataset_info)(data.settings(config.data))
  assert exit_.value.code == errors.MACHINE_FAULT_EXIT == 3
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith(f'error: {path}:2: 1 tab-separated fields where ') and line.endswith(
      SKIP_HINT)


def test_lra_retrieval_bad_rows_refused_or_skipped(tmp_path, make_data_config):
  rows = [(f'{i % 2}.0', f'doc{i}a', f'doc{i}b') for i in range(6)]
  for split in ('train', 'eval', 'test'):
    with open(tmp_path / f'new_aan_pairs.{split}.tsv', 'w') as f:
      f.writelines(f'{label}\tid_a\tid_b\t{a}\t{b}\n' for label, a, b in rows)
  path = tmp_path / 'new_aan_pairs.train.tsv'
  _damage_lines(path, {2: lambda line: 'yes' + line[3:], 6: lambda line: None})
  config = make_data_config('lra_retrieval', tsv_dir=str(tmp_path), max_length=8)
  with pytest.raises(bad_records.BadRecord) as refused:
    data.get_dataset_info(data.settings(config.data))
  assert str(refused.value) == (f"{path}:2: the label 'yes' is not 0 or 1; download the LRA "
                                f'release again (lra_release.gz, tsv_data/), {SKIP_HINT}')
  config.data.skip_bad_records = True
  before = _skipped(path)
  kept = base.get_spec('lra_retrieval').source(data.settings(config.data), 'train')
  assert _skipped(path) - before == 2
  assert [(r['label'], r['text1']) for r in kept] == [(0, 'doc0a'), (0, 'doc2a'), (1, 'doc3a'),
                                                     (0, 'doc4a')]


@pytest.mark.parametrize('damage', ['crc', 'cut'])
def test_a_damaged_text8_zip_is_refused_at_open(tmp_path, damage, make_data_config):
  """A flipped byte of the member (its CRC-32 fails) or the file cut in half (no central
  directory): one line naming the file and where it comes from, when the split is opened."""
  text = b'the quick brown fox jumps over the lazy dog ' * 40
  path = tmp_path / 'text8.zip'
  with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as archive:
    archive.writestr('text8', text)
  raw = bytearray(path.read_bytes())
  if damage == 'crc':
    at = raw.index(text[:20]) + 100
    raw[at] ^= 1
  else:
    raw = raw[:len(raw) // 2]
  path.write_bytes(bytes(raw))
  config = make_data_config('text8', data_dir=str(tmp_path), max_length=16,
                            split_sizes=(1000, 300, 300))
  with pytest.raises(errors.DataFault) as refused:
    data.get_dataset_info(data.settings(config.data))
  problem = "Bad CRC-32 for file 'text8'" if damage == 'crc' else 'File is not a zip file'
  assert str(refused.value) == (
      f'{path} is damaged or cut short ({problem}); copy the official text8.zip '
      '(mattmahoney.net/dc/text8.zip) there again')
  text_lm.load_symbols.cache_clear()


def _shard(data_dir, split):
  (folder,) = [root for root, _, names in os.walk(data_dir) if 'dataset_info.json' in names]
  (name,) = [n for n in os.listdir(folder) if f'-{split}.array_record' in n]
  return folder, os.path.join(folder, name)


def test_a_truncated_or_swapped_array_record_shard_is_refused_at_open(
    tmp_path, make_listops_config, make_data_config):
  """Generated ListOps (TFDS array_record): the train shard cut in half, then the validation
  shard copied over it (a whole file, 11 records where the split has 60). Opening the split,
  by the ListOps reader or by tfds_source as the TFDS datasets are, names the shard file."""
  config = make_listops_config(tmp_path / 'cut')
  listops.source(data.settings(config.data),
                 'test')                    # generated; the train split not read
  folder, train = _shard(tmp_path / 'cut', 'train')
  os.truncate(train, os.path.getsize(train) // 2)
  with pytest.raises(errors.DataFault) as refused:
    listops.source(data.settings(config.data), 'train')
  assert str(refused.value).startswith(
      f"{train}: the array_record shard of the generated ListOps split 'train' is cut short or "
      'damaged (')
  assert str(refused.value).endswith(f'); delete {folder}: it is generated again on first use')

  config = make_listops_config(tmp_path / 'swapped')
  listops.source(data.settings(config.data), 'test')
  folder, train = _shard(tmp_path / 'swapped', 'train')
  shutil.copy(_shard(tmp_path / 'swapped', 'validation')[1], train)
  name = f'poolformers_listops/{os.path.basename(os.path.dirname(folder))}'
  with pytest.raises(errors.DataFault) as refused:
    base.tfds_source(name, 'train[:50%]', str(tmp_path / 'swapped'))
  assert str(refused.value) == (
      f"{train}: the array_record shard of TFDS {name} split 'train[:50%]' holds 11 records "
      f'where dataset_info.json says 60; run `{base.build_command(name, str(tmp_path / "swapped"))}'
      '` again, or copy a folder prepared elsewhere here again')
  assert len(base.tfds_source(name, 'test', str(tmp_path / 'swapped'))) == 13   # intact


def _pathfinder_release(tmp_path, count):
  """A release-layout Pathfinder folder of `count` 8x8 images in one metadata file."""
  folder = tmp_path / 'curv_baseline'
  os.makedirs(folder / 'imgs' / '0')
  os.makedirs(folder / 'metadata')
  images = np.random.default_rng(3).integers(0, 256, (count, 8, 8), dtype=np.uint8)
  lines = []
  for i, image in enumerate(images):
    Image.fromarray(image).save(folder / 'imgs' / '0' / f'sample_{i}.png')
    lines.append(f'imgs/0 sample_{i}.png {i} {i % 2} 0.5 1\n')
  (folder / 'metadata' / '0.npy').write_text(''.join(lines))
  return folder, images


def _rows(config, split):
  rows, targets = [], []
  for batch in data.make_eval_iterator(data.settings(config.data), split, batch_size=2):
    rows += list(batch['inputs'][batch['mask']])
    targets += list(batch['targets'][batch['mask']])
  return rows, targets


def test_an_image_that_does_not_decode_is_refused_or_skipped_and_counted(
    tmp_path, make_data_config):
  """Pathfinder's PNG 2 of 10 cut in half: reading it refuses it, naming the file and the
  record; with skip_bad_records it is counted once however often it is read: the training
  records keep their length and read the next image in its place, while a one-pass evaluation
  leaves it out (as padding), so that no image counts twice."""
  folder, images = _pathfinder_release(tmp_path, 10)
  png = folder / 'imgs' / '0' / 'sample_2.png'
  png.write_bytes(png.read_bytes()[:len(png.read_bytes()) // 2])
  config = make_data_config('lra_pathfinder', pathfinder_dir=str(tmp_path),
                            format='lra_release', difficulty='curv_baseline', max_length=64)
  with pytest.raises(bad_records.BadRecord) as refused:
    _rows(config, 'train')
  line = str(refused.value)
  assert line.startswith(f'{png} (record 2 of 8) does not decode as an image (')
  assert line.endswith(SKIP_HINT) and '\n' not in line

  config.data.skip_bad_records = True
  before = _skipped(png)
  rows, targets = _rows(config, 'train')
  assert _rows(config, 'train')[1] == targets            # a second pass: the same rows
  assert _skipped(png) - before == 1
  read = [0, 1, 3, 4, 5, 6, 7]                           # record 2 left out
  assert targets == [i % 2 for i in read]
  for row, i in zip(rows, read):
    np.testing.assert_array_equal(row, images[i].reshape(-1).astype(np.int32) + 1)
  source = base.get_spec('lra_pathfinder').source(data.settings(config.data), 'train')
  training = bad_records.guarded(source, config.data)   # what the training iterator reads
  assert len(training) == 8
  np.testing.assert_array_equal(training[2]['image'], training[3]['image'])   # image 3 twice
  assert _skipped(png) - before == 1


def test_prepare_reports_a_damaged_release_file_and_goes_on(tmp_path):
  """`prepare lra` on a release whose ListOps validation file is cut mid-line: the ListOps line
  says damaged with the reader's line; the other tasks are still reported."""
  release = tmp_path / 'release'
  generator.write_tsv(str(release / 'listops-1000'), seed=5,
                      sizes={'train': 4, 'validation': 4, 'test': 4}, min_tokens=8, max_tokens=30)
  path = release / 'listops-1000' / 'basic_val.tsv'
  _damage_lines(path, {5: lambda line: None})
  lines = prepare.report(str(release), str(tmp_path / 'tfds'))
  assert len(lines) == 10
  task, state, message = lines[0].split(maxsplit=2)
  assert (task, state) == ('listops', 'damaged')
  assert message.startswith(f'{path}:5: 1 tab-separated fields where a ListOps line has 2 ')
  assert all(' missing ' in line for line in lines[1:])


def test_a_damaged_chunk_inside_a_shard_names_its_record_when_read(
    tmp_path, make_listops_config, make_data_config):
  """A byte flipped inside the train shard's data (its footer still reads, the counts agree):
  the record whose chunk it is, as a raw array_record reader finds it, is named with its shard
  and position when read (through a split that starts at record 10, and by the ListOps reader
  at open); with skip_bad_records it is replaced by the next record, counted."""
  from array_record.python import array_record_module
  config = make_listops_config(tmp_path)
  listops.source(data.settings(config.data), 'test')
  folder, train = _shard(tmp_path, 'train')
  raw = bytearray(open(train, 'rb').read())
  raw[len(raw) // 64] ^= 0xFF
  reader = array_record_module.ArrayRecordReader(train)
  intact = [reader.read([i])[0] for i in range(60)]
  with open(train, 'wb') as f:
    f.write(bytes(raw))
  reader = array_record_module.ArrayRecordReader(train)
  unreadable = []
  for i in range(60):
    try:
      assert reader.read([i])[0] == intact[i]
    except RuntimeError:
      unreadable.append(i)
  (bad,) = unreadable
  assert bad >= 11
  name = f'poolformers_listops/{os.path.basename(os.path.dirname(folder))}'
  records = base.tfds_source(name, 'train[10:]', str(tmp_path))
  assert len(records) == 50
  with pytest.raises(bad_records.BadRecord) as refused:
    records[bad - 10]
  assert str(refused.value).startswith(
      f"{train}: record {bad} of the array_record shard (record {bad - 10} of TFDS {name} split "
      "'train[10:]') does not read (Corrupted Riegeli/records file: ")
  assert str(refused.value).endswith(SKIP_HINT)
  with pytest.raises(bad_records.BadRecord, match=f'^{train}: record {bad} of the array_record'):
    listops.source(data.settings(config.data), 'train')

  config.data.skip_bad_records = True
  before = _skipped(train)
  skipping = bad_records.guarded(records, skip=True)
  np.testing.assert_array_equal(skipping[bad - 10]['tokens'], records[bad - 9]['tokens'])
  np.testing.assert_array_equal(skipping[bad - 11]['tokens'], records[bad - 11]['tokens'])
  np.testing.assert_array_equal(skipping[bad - 10]['tokens'], records[bad - 9]['tokens'])
  assert _skipped(train) - before == 1                   # read twice, counted once


def test_a_listops_token_outside_the_vocabulary_names_its_line_or_is_left_out(
    tmp_path, make_data_config):
  """Line 5 of the release's train file holds `[MIX`, which no ListOps tokenizer knows: opening
  the split names the file and the line in one line; with skip_bad_records that row is left out
  (counted) and the others read as the undamaged file reads them."""
  good, bad = tmp_path / 'good', tmp_path / 'bad'
  generator.write_tsv(str(good), seed=5, sizes={'train': 6, 'validation': 4, 'test': 4},
                      min_tokens=8, max_tokens=30)
  shutil.copytree(good, bad)
  path = bad / 'basic_train.tsv'
  _damage_lines(path, {5: lambda line: '[MIX ' + line})
  config = make_data_config('listops', source='tsv', tsv_dir=str(bad), max_length=32)
  with pytest.raises(bad_records.BadRecord) as refused:
    listops.source(data.settings(config.data), 'train')
  assert str(refused.value).startswith(f"{path}:5: token '[MIX' is not in the ListOps vocabulary")
  assert str(refused.value).endswith(SKIP_HINT) and '\n' not in str(refused.value)

  _assert_skips_to(config, path, good, make_data_config, skipped=1,
                   rows=[0, 1, 2, 4, 5])   # row 4 (line 5) left out
