"""Machine translation: WMT14 EN-DE / EN-FR through `tfds.data_source`, a shared SentencePiece
vocabulary, and packed training rows (ContextPool paper sec. 4.1, as the Flax `wmt` example).

Records: TFDS `wmt14_translate/de-en` or `/fr-en` as array_record (validation = newstest2013,
test = newstest2014), or, with config.data.source='tsv', `{tsv_dir}/{train,validation,test}.tsv`
lines `source<TAB>target` (any parallel corpus).

Vocabulary: a single SentencePiece model for both languages (unigram, 32K by default), trained
once on at most `spm_max_chars` characters of the training text and stored beside the data
(`vocab_path`). Ids: 0 = padding (also the decoder's start token), 1 = EOS, 2 = UNK (the Flax
example's choice); every sentence ends with EOS.

Examples: {'inputs': source ids, 'targets': target ids}. Train rows are packed first-fit into
rows of max_length tokens by grain's FirstFitPackIterDataset, which adds
`{inputs,targets}_segment_ids` (1, 2, ... per sentence, 0 = padding) and `_positions`; the model
turns them into masks so packed sentences never see each other. Training pairs longer than
max_length are dropped (as Flax wmt); evaluation pairs are cut (config.data.too_long), and eval.py
scores against the raw reference text.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import tempfile

import numpy as np

from poolformers_jax import extras
from poolformers_jax.data import base

# The model learns EOS_ID from the info (model_defaults: config.model.eos_id).
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
PAIRS = ('de-en', 'fr-en')


def _tfds_name(settings) -> str:
  if settings.pair not in PAIRS:
    raise ValueError(f'config.data.pair={settings.pair!r}; choose one of {PAIRS}.')
  return f'wmt14_translate/{settings.pair}'


def tsv_pair(line: str) -> dict[str, str]:
  """A `source<TAB>target` line as the record {'src': ..., 'tgt': ...}."""
  src, _, tgt = line.partition('\t')
  return {'src': src, 'tgt': tgt}


def source(settings: TranslationSettings, split):
  split = base.check_split(split)
  if settings.source == 'tsv':
    path = os.path.join(base.expand_path(settings.tsv_dir), f'{split}.tsv')
    base.require_file(path, 'write one `source<TAB>target` pair per line, or use '
                      "config.data.source='tfds'.")
    return base.LineFile(path, parse=tsv_pair)
  if settings.source != 'tfds':
    raise ValueError(f"config.data.source={settings.source!r}; choose 'tfds' or 'tsv'.")
  import tensorflow_datasets.translate.wmt14  # noqa: F401  registers wmt14_translate (no TF)
  return base.tfds_source(_tfds_name(settings), settings.tfds_splits[split],
                          settings.data_dir)


def record_texts(record, settings) -> tuple[str, str]:
  """(source text, target text) of one raw record (TFDS: keyed by language; tsv: src/tgt)."""
  if 'src' in record:
    return record['src'], record['tgt']
  src_lang, tgt_lang = settings.source_language, settings.target_language
  decode = lambda t: t.decode('utf-8') if isinstance(t, bytes) else str(t)
  return decode(record[src_lang]), decode(record[tgt_lang])


# ------------------------------------------------------------------ SentencePiece vocabulary

def vocab_path(settings) -> str:
  """Where the shared SentencePiece model lives (beside the data)."""
  if settings.spm_model:
    return base.expand_path(settings.spm_model)
  folder = (base.expand_path(settings.tsv_dir) if settings.source == 'tsv' else
            os.path.join(base.expand_path(settings.data_dir), _tfds_name(settings)))
  langs = ''.join(sorted((settings.source_language, settings.target_language)))
  return os.path.join(folder, f'spm_{settings.vocab_size}_{langs}.model')


def train_sentencepiece(settings, path: str) -> str:
  """Trains the shared SentencePiece model on the training text; written atomically to `path`."""
  extras.require('text', 'WMT14 (SentencePiece)')
  import sentencepiece as spm
  records = source(settings, 'train')
  budget = int(settings.spm_max_chars)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
    corpus = os.path.join(tmp, 'corpus.txt')
    with open(corpus, 'w', encoding='utf-8') as f:
      for i in range(len(records)):
        src, tgt = record_texts(records[i], settings)
        f.write(src.replace('\n', ' ') + '\n' + tgt.replace('\n', ' ') + '\n')
        budget -= len(src) + len(tgt)
        if budget <= 0:
          break
    prefix = os.path.join(tmp, 'spm')
    spm.SentencePieceTrainer.Train(
        input=corpus, model_prefix=prefix, vocab_size=int(settings.vocab_size),
        model_type='unigram', character_coverage=1.0, pad_id=PAD_ID, eos_id=EOS_ID,
        unk_id=UNK_ID, bos_id=-1, input_sentence_size=10_000_000, shuffle_input_sentence=True,
        hard_vocab_limit=bool(settings.spm_hard_vocab_limit),
        num_threads=max(os.cpu_count() or 1, 1), minloglevel=2)
    os.replace(prefix + '.model', path)
  logging.info('trained SentencePiece (%d pieces) -> %s', settings.vocab_size, path)
  return path


@functools.lru_cache(maxsize=8)
def _load_processor(path: str):
  extras.require('text', 'WMT14 (SentencePiece)')
  import sentencepiece as spm
  return spm.SentencePieceProcessor(model_file=path)


def get_tokenizer(settings: TranslationSettings):
  """The shared SentencePieceProcessor, trained first if it is not beside the data yet."""
  path = vocab_path(settings)
  if not os.path.exists(path):
    if settings.spm_model:
      raise base.DataNotFoundError(f'{path} not found: point config.data.spm_model at a trained '
                                   'SentencePiece model, or unset it to train one.')
    train_sentencepiece(settings, path)
  return _load_processor(path)


def encode(tokenizer, text: str) -> np.ndarray:
  return np.asarray(tokenizer.encode(text) + [EOS_ID], np.int32)


def decode(tokenizer, ids) -> str:
  """Token ids -> text, up to the first EOS (padding dropped)."""
  ids = [int(i) for i in np.asarray(ids)]
  if EOS_ID in ids:
    ids = ids[:ids.index(EOS_ID)]
  return tokenizer.decode([i for i in ids if i != PAD_ID])


# ------------------------------------------------------------------ examples and packing

def preprocess(record, settings: TranslationSettings, rng: np.random.Generator | None = None):
  """Token ids with EOS. Train (rng given) with packing: unpadded (the packer pads); else padded
  to max_length."""
  tokenizer = get_tokenizer(settings)
  src, tgt = record_texts(record, settings)
  example = {'inputs': encode(tokenizer, src), 'targets': encode(tokenizer, tgt)}
  if rng is not None and settings.pack:
    return example
  return {k: base.fit_length(v, settings.max_length, settings.too_long, f'{k} of a pair')
          for k, v in example.items()}


class _Fits:
  """Picklable filter: both sides of a pair fit in max_length tokens."""

  def __init__(self, max_length: int):
    self.max_length = max_length

  def __call__(self, example) -> bool:
    return all(len(v) <= self.max_length for v in example.values())


def pack(examples, settings, batch_size: int, seed: int):
  """grain IterDataset of variable-length examples -> batches of packed rows (first fit)."""
  import grain
  length = int(settings.max_length)
  fitting = examples.filter(_Fits(length))
  packed = grain.experimental.FirstFitPackIterDataset(
      fitting, length_struct={'inputs': length, 'targets': length},
      num_packing_bins=int(settings.packing_bins) or batch_size, seed=seed,
      shuffle_bins=True)
  return packed.batch(batch_size, drop_remainder=True)


def info(settings, *, from_files: bool = True) -> base.DatasetInfo:
  """`from_files=False` (DatasetSpec.shapes): config.data.vocab_size pieces (exact with
  spm_hard_vocab_limit), no split sizes."""
  vocab = get_tokenizer(settings).get_piece_size() if from_files else settings.vocab_size
  return base.DatasetInfo(
      name=settings.name, task='seq2seq', num_classes=vocab, vocab_size=vocab,
      input_shape=(settings.max_length,), packed=bool(settings.pack),
      model_defaults={'eos_id': EOS_ID},
      split_sizes=({split: len(source(settings, split)) for split in base.SPLITS}
                   if from_files else {}))


@dataclasses.dataclass(frozen=True)
class TranslationSettings(base.DataSettings):
  """English -> German (`pair` 'de-en') or French ('fr-en')."""
  name: str = 'wmt14'
  max_length: int = 256           # tokens per (packed) row, source and target alike
  source: str = 'tfds'            # 'tfds' (wmt14_translate/<pair>) | 'tsv' ({tsv_dir}/<split>.tsv)
  pair: str = 'de-en'
  source_language: str = 'en'
  target_language: str = 'de'
  tfds_splits: dict = base.mapping(   # nt2013 / nt2014
      train='train', validation='validation', test='test')
  tsv_dir: str = base.under_data_dir('translation_tsv')
  vocab_size: int = 32000         # shared SentencePiece vocabulary (both languages)
  spm_max_chars: int = 10_000_000   # training text read to train it (Flax wmt's default)
  spm_hard_vocab_limit: bool = True   # False lets a tiny corpus have fewer pieces than vocab_size
  spm_model: str = ''             # an existing .model to use ('' = train / find beside data)
  pack: bool = True               # pack training pairs into rows (segment ids + positions)
  packing_bins: int = 0           # first-fit bins per round; 0 = the per-process batch size


base.register_dataset('wmt14', base.DatasetSpec(
    info, source, preprocess, TranslationSettings, pack=pack,
    shapes=functools.partial(info, from_files=False),
    record=lambda raw, _: {'src': raw, 'tgt': ''},
    run_files=lambda settings: [vocab_path(settings)]))
