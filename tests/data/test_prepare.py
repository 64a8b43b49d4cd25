"""`python -m poolformers_jax.data.prepare lra`: one line per task on a fake release folder."""
import ml_collections
import numpy as np
from PIL import Image

from poolformers_jax import data
from poolformers_jax.data import prepare


def _fake_release(root):
  listops = root / 'listops-1000'
  listops.mkdir(parents=True)
  for name, rows in (('basic_train.tsv', 3), ('basic_val.tsv', 2), ('basic_test.tsv', 1)):
    (listops / name).write_text('Source\tTarget\n' + '( ( [MAX 2 ) 9 ] )\t9\n' * rows)
  folder = root / 'pathfinder32' / 'curv_baseline'
  (folder / 'imgs' / '0').mkdir(parents=True)
  (folder / 'metadata').mkdir()
  lines = []
  for i in range(10):
    path = folder / 'imgs' / '0' / f'sample_{i}.png'
    if i == 3:
      path.write_bytes(b'')    # the release's empty image (curv_baseline/imgs/0/sample_172.png)
    else:
      Image.fromarray(np.full((4, 4), 10 * i, np.uint8)).save(path)
    lines.append(f'imgs/0 sample_{i}.png {i} {i % 2} 1.8 6 2 2 1 1 1\n')
  lines.append('imgs/0 sample_99.png 99 1 1.8 6 2 2 1 1 1\n')   # listed but not there
  (folder / 'metadata' / '0.npy').write_text(''.join(lines))
  return folder


def test_prepare_report_on_a_fake_release(tmp_path, capsys):
  folder = _fake_release(tmp_path / 'release')
  prepare.main(['lra', '--release_dir', str(tmp_path / 'release'),
                '--data_dir', str(tmp_path / 'tfds')])
  lines = capsys.readouterr().out.splitlines()
  by_task = {line.split()[0]: line for line in lines}
  assert len(lines) == 10   # listops, retrieval, text, image, 2 resolutions x 3 difficulties
  assert by_task['listops'].split()[1:3] == ['found', '3/2/1']
  assert by_task['retrieval'].split()[1] == 'missing'
  assert 'new_aan_pairs.train.tsv' in by_task['retrieval']
  assert 'build_tfds.py imdb_reviews/plain_text' in by_task['text'] and 'missing' in by_task['text']
  assert 'build_tfds.py cifar10' in by_task['image']
  line = by_task['pathfinder32/curv_baseline']
  assert ' found    9 images; skipped 2 missing or empty images' in line
  for difficulty in ('curv_contour_length_9', 'curv_contour_length_14'):
    assert 'missing' in by_task[f'pathfinder32/{difficulty}']
    assert f'--difficulty {difficulty}' in by_task[f'pathfinder32/{difficulty}']

  # The reader skips the same two images: a whole epoch reads, no crash on the empty PNG.
  config = ml_collections.ConfigDict({'seed': 0, 'batch_size': 3,
                                      'data': data.get_data_config('lra_pathfinder')})
  config.data.update(format='lra_release', max_length=16,
                     pathfinder_dir=str(tmp_path / 'release' / 'pathfinder32'))
  sizes = data.get_dataset_info(data.settings(config.data)).split_sizes
  assert sum(sizes.values()) == 9
  values = []
  for split in ('train', 'validation', 'test'):
    for batch in data.make_eval_iterator(data.settings(config.data), split, batch_size=3):
      values += [row[0] - 1 for row in batch['inputs'][batch['mask']]]
  assert sorted(values) == [10 * i for i in range(10) if i != 3]
  assert folder.exists()
