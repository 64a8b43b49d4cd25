r"""Check which Long Range Arena data is ready: one line per task (found / missing / damaged,
with what to do).

  python -m poolformers_jax.data.prepare lra --release_dir DIR [--data_dir data_cache]

DIR is the unpacked LRA release (lra_release.gz: listops-1000/, tsv_data/, pathfinder32/,
pathfinder128/); data_dir holds the TFDS array_record datasets imdb_reviews and cifar10. Nothing
is downloaded or written; missing or empty Pathfinder images are counted, as the reader skips them.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import sys
from collections.abc import Sequence

from poolformers_jax import errors
from poolformers_jax.data import base, listops, listops_tokens, lra, lra_pathfinder, lra_retrieval

_W = 38   # width of the task column
GET_RELEASE = ('download lra_release.gz (github.com/google-research/long-range-arena) and unpack '
               'it; pass its folder as --release_dir')


def _tsv_line(task: str, folder: str, files: dict[str, str], make) -> str:
  paths = {split: os.path.join(folder, name) for split, name in files.items()}
  absent = [p for p in paths.values() if not os.path.exists(p)]
  if absent:
    return f'{task:<{_W}} missing  {absent[0]}: {GET_RELEASE}.'
  try:
    sizes = {split: len(make(path)) for split, path in paths.items()}
  except errors.DataFault as e:
    return f'{task:<{_W}} damaged  {e}'
  return (f'{task:<{_W}} found    ' + '/'.join(str(sizes[s]) for s in base.SPLITS)
          + f' train/validation/test examples in {folder}')


def _pathfinder_lines(release_dir: str, resolution: int) -> list[str]:
  lines = []
  for difficulty in lra.PATHFINDER_DIFFICULTIES:
    task = f'pathfinder{resolution}/{difficulty}'
    folder = os.path.join(release_dir, f'pathfinder{resolution}', difficulty)
    try:
      entries, skipped = lra_pathfinder.release_images(folder)
    except base.DataNotFoundError:
      lines.append(f'{task:<{_W}} missing  {folder}/metadata: {GET_RELEASE}, or generate it: '
                   f'python -m poolformers_jax.data.generators.pathfinder --out_dir DIR '
                   f'--resolution {resolution} --difficulty {difficulty}.')
      continue
    note = f'; skipped {skipped} missing or empty images' if skipped else ''
    lines.append(f'{task:<{_W}} found    {len(entries)} images{note} in {folder}')
  return lines


def _tfds_line(task: str, settings) -> str:
  try:
    sizes = {split: len(base.tfds_source(settings.tfds_name, split, settings.data_dir))
             for split in ('train', 'test')}
  except base.DataNotFoundError as e:
    data_dir = base.expand_path(settings.data_dir)
    folder = os.path.join(data_dir, settings.tfds_name.split('/')[0])
    if glob.glob(os.path.join(folder, '**', '*.tfrecord*'), recursive=True):
      return (f'{task:<{_W}} missing  {folder} holds TFRecord files, not array_record: build it '
              f'as array_record: `{base.build_command(settings.tfds_name, data_dir)}`.')
    return f'{task:<{_W}} missing  {e}'
  except errors.DataFault as e:
    return f'{task:<{_W}} damaged  {e}'
  return (f'{task:<{_W}} found    {sizes["train"]}/{sizes["test"]} train/test examples '
          f'({settings.tfds_name} in {base.expand_path(settings.data_dir)})')


def report(release_dir: str, data_dir: str | None = None) -> list[str]:
  """The lines `prepare lra` prints, one per task (Pathfinder: one per difficulty)."""
  lines = [_tsv_line('listops', os.path.join(release_dir, 'listops-1000'),
                     listops_tokens.TSV_FILES, listops.TsvSource)]
  if lines[0].split()[1] == 'missing':
    lines[0] += " Or nothing: config.data.source='generated' (the default) makes ListOps offline."
  lines.append(_tsv_line('retrieval', os.path.join(release_dir, 'tsv_data'),
                         lra_retrieval.FILES, lra_retrieval.read_file))
  for task, name in (('text (imdb_reviews)', 'lra_text'), ('image (cifar10)', 'lra_image')):
    settings = base.get_spec(name).defaults()
    if data_dir:
      settings = dataclasses.replace(settings, data_dir=data_dir)
    lines.append(_tfds_line(task, settings))
  for resolution in (32, 128):
    lines += _pathfinder_lines(release_dir, resolution)
  return lines


@errors.one_line_errors
def main(argv: Sequence[str] | None = None) -> None:
  parser = errors.ArgumentParser(prog='python -m poolformers_jax.data.prepare',
                                 description=__doc__.split('\n\n')[0])
  parser.add_argument('benchmark', choices=['lra'])
  parser.add_argument('--release_dir', required=True, help='the unpacked LRA release')
  parser.add_argument('--data_dir', default=None,
                      help='TFDS array_record data (default: POOLFORMERS_DATA_DIR or data_cache)')
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)
  if not os.path.isdir(os.path.expanduser(args.release_dir)):
    raise FileNotFoundError(f'--release_dir {args.release_dir} is not a folder; {GET_RELEASE} '
                            '(ListOps needs none: it is generated offline)')
  for line in report(os.path.expanduser(args.release_dir), args.data_dir):
    print(line)


if __name__ == '__main__':
  main()
