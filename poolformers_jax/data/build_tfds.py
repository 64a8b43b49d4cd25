r"""Builds TFDS datasets as array_record files, in the data-preparation environment
(requirements-data.txt): the only step that needs TensorFlow.

  make data-env        # once: .venv-data with TensorFlow and the project's tensorflow-datasets
  .venv-data/bin/python poolformers_jax/data/build_tfds.py imdb_reviews cifar10 \
      --data_dir data_cache

Downloads each dataset (the only step that needs the network) and writes DATA_DIR/<name>/<version>/
as array_record, which `tfds.data_source` reads without TensorFlow. Names as TFDS spells them
(imdb_reviews, wmt14_translate/de-en, glue/mrpc, ...); imagenet2012 needs its manual download in
--manual_dir. Run as a file (not `-m`): the package's dependencies are not installed there.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from poolformers_jax import errors  # noqa: E402  (absl only: installed with tensorflow-datasets)


@errors.one_line_errors
def main(argv=None) -> None:
  parser = errors.ArgumentParser(prog='.venv-data/bin/python poolformers_jax/data/build_tfds.py',
                                 description=__doc__.split('\n\n')[0])
  parser.add_argument('names', nargs='+', help='TFDS dataset names, e.g. imdb_reviews cifar10')
  parser.add_argument('--data_dir', default='data_cache', help='where the datasets are written')
  parser.add_argument('--manual_dir', default=None,
                      help='imagenet2012: the folder of its manually downloaded archives')
  args = parser.parse_args(argv)
  try:
    import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise FileNotFoundError(f'{error}: run this in the data-preparation environment, '
                            '.venv-data/bin/python (make data-env creates it)') from None
  for name in args.names:
    try:
      builder = tfds.builder(name, data_dir=args.data_dir, file_format='array_record')
    except tfds.core.registered.DatasetNotFoundError:
      raise ValueError(f'{name!r} is not a TFDS dataset; pass names as TFDS spells them, e.g. '
                       'imdb_reviews cifar10 wmt14_translate/de-en') from None
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=args.manual_dir))
    print(f'{name}: {builder.data_dir}', flush=True)


if __name__ == '__main__':
  main()
