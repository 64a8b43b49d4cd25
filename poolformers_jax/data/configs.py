"""Defaults for `config.data`, one function per dataset: `get_data_config(name)`.

Fields every dataset has:
  name          the dataset (a key of data.DATASETS)
  data_dir      where TFDS array_record files live / are generated (env POOLFORMERS_DATA_DIR,
                else ./data_cache, which git ignores); for enwik8/text8 the folder of the zip file
  max_length    sequence length examples are padded (with id 0) or cut to; 0 for images
  max_tokens    (lra_text, lra_retrieval) cut to this many bytes first, then pad to max_length
                (PoNet's LRA data: 4000 bytes + 96 padding = 4096); 0 = max_length
  too_long      'truncate' (keep the first max_length tokens, as the LRA pipelines do) or
                'error' (raise on any longer input)
  tfds_splits   (TFDS datasets) our split name -> TFDS split name or slice
  worker_count  grain worker processes; 0 = in-process (starting workers costs about 2 s)
  read_threads  grain threads reading records ahead in the main process
The returned ConfigDicts are not locked; the experiment config that embeds one locks it.
"""
from __future__ import annotations

import os

import ml_collections


def _default_data_dir() -> str:
  return os.environ.get('POOLFORMERS_DATA_DIR', 'data_cache')


def _common(name: str, max_length: int) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = name
  c.data_dir = _default_data_dir()
  c.max_length = max_length
  c.too_long = 'truncate'
  c.worker_count = 0
  c.read_threads = 4
  return c


def listops() -> ml_collections.ConfigDict:
  c = _common('listops', 2048)
  c.source = 'generated'          # 'generated' (seeded, auto-prepared) | 'tsv' (LRA release files)
  c.tsv_dir = os.path.join(_default_data_dir(), 'lra_release', 'listops-1000')
  c.keep_parentheses = False      # the official strings' '(' ')' carry nothing beyond ']'
  c.generator = ml_collections.ConfigDict(dict(
      seed=0, min_tokens=500, max_tokens=2000, max_depth=10, max_args=10,
      num_train=96000, num_validation=2000, num_test=2000))
  return c


def lra_text() -> ml_collections.ConfigDict:
  # Bytes kept: LRA's code 1000, Nystromformer 1000 (padded to 1024), PoNet 4000 (padded to 4096,
  # configs/lra_text.py full), AdaMRA "4K". max_tokens cuts before padding to max_length.
  c = _common('lra_text', 4096)
  c.max_tokens = 0                # 0 = max_length
  c.tfds_name = 'imdb_reviews/plain_text'
  # IMDB has no validation split: LRA validates on test (lra_benchmarks/text_classification/
  # input_pipeline.py: "use test set for validation because IMDb doesn't have val set").
  c.tfds_splits = dict(train='train', validation='test', test='test')
  return c


def lra_retrieval() -> ml_collections.ConfigDict:
  c = _common('lra_retrieval', 4096)   # per document
  c.max_tokens = 0                # bytes kept per document (PoNet / Nystromformer: 4000); 0 = max_length
  c.tsv_dir = os.path.join(_default_data_dir(), 'lra_release', 'tsv_data')
  return c


def lra_image() -> ml_collections.ConfigDict:
  c = _common('lra_image', 1024)
  c.tfds_name = 'cifar10'
  # As LRA (lra_benchmarks/image/input_pipeline.py): 45k train, 5k validation, 10k test.
  c.tfds_splits = dict(train='train[:90%]', validation='train[90%:]', test='test')
  return c


def lra_pathfinder() -> ml_collections.ConfigDict:
  c = _common('lra_pathfinder', 1024)
  c.format = 'npz'                # 'npz' | 'lra_release' (PNGs) | 'generated' (pathfinder_gen.py)
  c.resolution = 32               # 'generated': 32 (Pathfinder) or 128 (Path-X, max_length 16384)
  c.difficulty = 'curv_baseline'  # curv_baseline | curv_contour_length_9 | ..._14
  c.pathfinder_dir = os.path.join(_default_data_dir(), 'lra_release', 'pathfinder32')
  # format='generated': made once into {data_dir}/pathfinder_gen/ in the LRA release layout.
  c.generator = ml_collections.ConfigDict(dict(seed=0, num_examples=200000, images_per_file=1000))
  return c


def _vision(name: str, image_size: int, tfds_name: str) -> ml_collections.ConfigDict:
  c = _common(name, 0)
  c.tfds_name = tfds_name
  c.image_size = image_size
  # Train crop: 'pad_crop' (CIFAR: zero-pad crop_padding pixels, random image_size crop) or
  # 'inception_crop' (ImageNet: random area 8-100 %, aspect 3/4-4/3, resized to image_size).
  # Eval: resize the shorter side to image_size / eval_crop_fraction, center crop image_size.
  small = image_size <= 64
  c.train_crop = 'pad_crop' if small else 'inception_crop'
  c.crop_padding = 4
  c.eval_crop_fraction = 1.0 if small else 0.875
  c.random_flip = True
  c.random_erasing = 0.0   # probability of timm RandomErasing per train image (DeiT: 0.25)
  c.rand_augment = ''      # timm RandAugment policy, '' = off (DeiT: 'rand-m9-mstd0.5-inc1')
  c.repeated_augmentation = 1   # each train image shown this many times in a row (DeiT: 3)
  # Per-channel mean/std of the training set (ImageNet values for ImageNet, CIFAR ones otherwise).
  c.mean = (0.485, 0.456, 0.406) if name == 'imagenet2012' else (0.4914, 0.4822, 0.4465)
  c.std = (0.229, 0.224, 0.225) if name == 'imagenet2012' else (0.2470, 0.2435, 0.2616)
  # Our split name -> TFDS split (slices such as 'train[98%:]' work too). CIFAR has no validation
  # split; ImageNet's labelled held-out set is 'validation'.
  c.tfds_splits = (dict(train='train', validation='validation', test='validation')
                   if name == 'imagenet2012' else dict(train='train', validation='test', test='test'))
  return c


def cifar10() -> ml_collections.ConfigDict:
  return _vision('cifar10', 32, 'cifar10')


def cifar100() -> ml_collections.ConfigDict:
  return _vision('cifar100', 32, 'cifar100')


def imagenet2012() -> ml_collections.ConfigDict:
  return _vision('imagenet2012', 224, 'imagenet2012')


def _char_lm(name: str) -> ml_collections.ConfigDict:
  c = _common(name, 512)
  c.data_dir = os.path.join(_default_data_dir(), name)   # holds enwik8.zip / text8.zip
  c.split_sizes = (90_000_000, 5_000_000, 5_000_000)     # bytes (enwik8) / characters (text8)
  # Validation / test windows: 'windows' (non-overlapping, max_length) or 'sliding' (ContextPool
  # Table 5 / Longformer: eval_context symbols every eval_step, the new ones scored; text_lm.py).
  c.eval_protocol = 'windows'
  c.eval_context = 32_768
  c.eval_step = 512
  return c


def enwik8() -> ml_collections.ConfigDict:
  return _char_lm('enwik8')


def text8() -> ml_collections.ConfigDict:
  return _char_lm('text8')


def wmt14() -> ml_collections.ConfigDict:
  """WMT14 translation (data/translation.py); `pair` 'de-en' or 'fr-en', English -> the other."""
  c = _common('wmt14', 256)        # tokens per (packed) row, source and target alike
  c.source = 'tfds'                # 'tfds' (wmt14_translate/<pair>) | 'tsv' ({tsv_dir}/<split>.tsv)
  c.pair = 'de-en'
  c.source_language = 'en'
  c.target_language = 'de'
  c.tfds_splits = dict(train='train', validation='validation', test='test')  # nt2013 / nt2014
  c.tsv_dir = os.path.join(_default_data_dir(), 'translation_tsv')
  c.vocab_size = 32000             # shared SentencePiece vocabulary (both languages)
  c.spm_max_chars = 10_000_000     # training text read to train it (Flax wmt's default)
  c.spm_hard_vocab_limit = True    # False lets a tiny corpus have fewer pieces than vocab_size
  c.spm_model = ''                 # an existing .model to use instead ('' = train/find beside data)
  c.pack = True                    # pack training pairs into rows (segment ids + positions)
  c.packing_bins = 0               # first-fit bins per round; 0 = the per-process batch size
  return c


def _wordpiece(name: str, max_length: int) -> ml_collections.ConfigDict:
  c = _common(name, max_length)
  c.too_long = 'truncate'
  # A BERT vocab.txt, e.g. the one shipped with chtan/ponet-base-uncased.
  c.vocab_file = os.path.join(_default_data_dir(), 'ponet-base-uncased', 'vocab.txt')
  c.lowercase = True               # uncased, as PoNet-Base
  return c


def text_pretraining() -> ml_collections.ConfigDict:
  """MLM + SSO / NSP pairs (data/bert_text.py); source 'text_files' or 'tfds' (wikipedia)."""
  c = _wordpiece('text_pretraining', 512)
  c.objective = 'sso'              # 'sso' (StructBERT, the paper) | 'nsp' (BERT) | 'mlm' (only)
  c.source = 'text_files'
  # Globs of plain text files: documents separated by blank lines, a sentence per line.
  c.files = dict(train=os.path.join(_default_data_dir(), 'corpus', 'train', '*.txt'),
                 validation=os.path.join(_default_data_dir(), 'corpus', 'validation', '*.txt'),
                 test=os.path.join(_default_data_dir(), 'corpus', 'validation', '*.txt'))
  c.sentence_split = 'line'        # 'line' | 'regex' (split after . ! ?) | 'paragraph'
  c.tfds_name = 'wikipedia/20230601.en'    # source='tfds': TFDS wikipedia (has only 'train')
  c.tfds_splits = dict(train='train[20000:]', validation='train[:10000]', test='train[10000:20000]')
  c.mask_probability = 0.15
  c.short_seq_prob = 0.1
  c.eval_seed = 0
  return c


def glue() -> ml_collections.ConfigDict:
  c = _wordpiece('glue', 128)      # the official fine-tuning length
  c.task = 'cola'                  # cola sst2 mrpc qqp stsb mnli qnli rte wnli
  # GLUE's test labels are hidden: 'test' = the dev set (MNLI: validation matched, test mismatched).
  c.tfds_splits = dict(train='train', validation='validation', test='validation')
  return c


def text_classification() -> ml_collections.ConfigDict:
  c = _wordpiece('text_classification', 4096)   # PoNet's long-text length
  c.source = 'tfds'                # 'tfds' | 'files' (JSONL / CSV)
  c.tfds_name = 'imdb_reviews/plain_text'
  c.tfds_splits = dict(train='train', validation='test', test='test')   # official IMDb setting
  c.num_classes = 2                # TFDS only; files: the distinct train labels
  c.files = dict(train='', validation='', test='')
  c.text_field = 'text'
  c.label_field = 'label'
  c.sentence_split = 'regex'       # SMP segments: sentences ('paragraph' for Arxiv-11)
  return c


DATA_CONFIGS = {
    'listops': listops, 'lra_text': lra_text, 'lra_retrieval': lra_retrieval,
    'lra_image': lra_image, 'lra_pathfinder': lra_pathfinder, 'cifar10': cifar10,
    'cifar100': cifar100, 'imagenet2012': imagenet2012, 'enwik8': enwik8, 'text8': text8,
    'text_pretraining': text_pretraining, 'glue': glue, 'text_classification': text_classification,
    'wmt14': wmt14,
}


def get_data_config(name: str) -> ml_collections.ConfigDict:
  if name not in DATA_CONFIGS:
    raise ValueError(f'no data config named {name!r}; choose one of {sorted(DATA_CONFIGS)}.')
  return DATA_CONFIGS[name]()
