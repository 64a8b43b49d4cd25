"""The 'seq2seq' task's decoder: BLEU of a translation model on a split. `Translator` decodes (beam
search on the KV cache, sharded over the data axis), detokenizes with the shared SentencePiece
model and scores against the raw references.

Two numbers:
- `bleu`: sacreBLEU on detokenized text (13a tokenization, case-sensitive; signature reported
  as `bleu_signature`), the number comparable across papers.
- `tokenized_bleu`: the paper-style number (Vaswani et al., tensor2tensor's get_ende_bleu.sh; the
  ContextPool paper's Table 4): hypothesis and reference tokenized by the Moses tokenizer
  (`sacremoses`, escaping on, as tokenizer.perl), for EN-DE with compound splitting, then BLEU on
  those tokens (multi-bleu.perl's formula). config.decode.tokenized_bleu='13a' uses sacreBLEU's
  13a tokenizer instead (it splits "2013-2014" and keeps quotes unescaped).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from poolformers_jax import data
from poolformers_jax.data import translation
from poolformers_jax.models.seq2seq_decode import make_translate

_COMPOUND = re.compile(r'(\S)-(\S)')


def split_compounds(text: str) -> str:
  r"""tensor2tensor's compound splitting for German BLEU, one pass of the perl
  `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g` (so a-b-c -> a ##AT##-##AT## b-c, as there)."""
  return _COMPOUND.sub(r'\1 ##AT##-##AT## \2', text)


TOKENIZERS = ('moses', '13a')


@functools.lru_cache(maxsize=4)
def _tokenizer(kind: str, language: str) -> Callable[[str], str]:
  if kind == 'moses':
    from sacremoses import MosesTokenizer
    moses = MosesTokenizer(lang=language)
    return lambda text: moses.tokenize(text, escape=True, return_str=True)
  if kind == '13a':
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    return Tokenizer13a()
  raise ValueError(f'config.decode.tokenized_bleu={kind!r}; choose one of {TOKENIZERS}.')


def tokenize_for_bleu(text: str, target_language: str, kind: str = 'moses') -> str:
  """get_ende_bleu.sh's preparation: tokenized, then compounds split for German."""
  tokens = _tokenizer(kind, target_language)(text)
  return split_compounds(tokens) if target_language == 'de' else tokens


def bleu_scores(hypotheses: list[str], references: list[str], target_language: str,
                tokenized: str = 'moses') -> dict[str, Any]:
  """sacreBLEU (detokenized) and paper-style tokenized BLEU of hypotheses vs references."""
  from sacrebleu.metrics import BLEU
  bleu = BLEU()
  detok = bleu.corpus_score(hypotheses, [references])
  prepare = lambda t: tokenize_for_bleu(t, target_language, tokenized)
  paper = BLEU(tokenize='none', force=True).corpus_score(
      [prepare(h) for h in hypotheses], [[prepare(r) for r in references]])
  return {'bleu': detok.score, 'tokenized_bleu': paper.score,
          'bleu_signature': str(bleu.get_signature()), 'tokenized_bleu_tokenizer': tokenized}


# Source lengths are padded up to one of these (then to multiples of 128), so a split compiles
# the decoder for a few shapes only; each bucket's batch has batch_tokens // length rows.
BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def bucket_length(length: int) -> int:
  for bucket in BUCKETS:
    if length <= bucket:
      return bucket
  return -(-length // 128) * 128


def encode_source(tokenizer, text: str, max_length: int) -> np.ndarray:
  """Source ids ending in EOS; a longer source is cut to max_length tokens, EOS kept last."""
  ids = translation.encode(tokenizer, text)
  if len(ids) > max_length:
    ids = np.concatenate([ids[:max_length - 1], ids[-1:]])
  return ids


def length_batches(sources: list[np.ndarray], batch_tokens: int, multiple: int):
  """Yields (indices, ids [rows, length]): sources sorted by length, grouped by bucket length;
  `rows` = batch_tokens // length rounded down to a multiple of `multiple` (the devices), or for
  a bucket's last sentences the power of two (times `multiple`) that holds them; padding rows
  last."""
  order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
  start = 0
  while start < len(order):
    length = bucket_length(len(sources[order[start]]))
    end = start
    while end < len(order) and bucket_length(len(sources[order[end]])) == length:
      end += 1
    full = max(multiple, batch_tokens // length // multiple * multiple)
    for first in range(start, end, full):
      chunk = order[first:min(first + full, end)]
      rows = min(full, multiple * 2 ** int(np.ceil(np.log2(-(-len(chunk) // multiple)))))
      ids = np.zeros((rows, length), np.int32)
      for row, i in enumerate(chunk):
        ids[row, :len(sources[i])] = sources[i]
      yield chunk, ids
    start = end


def write_lines(path: str, lines: list[str]) -> None:
  if jax.process_index() == 0:
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
      f.writelines(line + '\n' for line in lines)


@dataclasses.dataclass
class Translator:
  """Translations and BLEU of a seq2seq `model`. `decode` is config.decode, `data` the dataset's
  settings (data.settings(config.data));
  decoding batches have a multiple of `devices` rows, laid out by the shardings (None: jax's
  defaults). A jitted decoder per (beam, alpha), compiled per bucket shape."""
  model: Any
  decode: Any
  data: translation.TranslationSettings
  devices: int = 1
  params_sharding: Any = None
  batch_sharding: Any = None
  out_sharding: Any = None
  _decoders: dict = dataclasses.field(default_factory=dict, repr=False)

  def _decoder(self, beam_size: int, alpha: float):
    if (beam_size, alpha) not in self._decoders:
      shardings = ({} if self.batch_sharding is None else
                   dict(in_shardings=(self.params_sharding, self.batch_sharding),
                        out_shardings=self.out_sharding))
      self._decoders[beam_size, alpha] = make_translate(self.model, None, beam_size, alpha,
                                                        **shardings)
    return self._decoders[beam_size, alpha]

  def translate(self, params, texts: list[str], *, beam_size: int | None = None,
                alpha: float | None = None, batch_tokens: int | None = None) -> list[str]:
    """Detokenized translations of `texts`, in their order (config.decode's settings unless
    given)."""
    decode = self.decode
    beam_size = int(decode.beam_size if beam_size is None else beam_size)
    alpha = float(decode.alpha if alpha is None else alpha)
    batch_tokens = int(decode.batch_tokens if batch_tokens is None else batch_tokens)
    if beam_size < 1 or batch_tokens < 1:
      raise ValueError(f'beam size {beam_size} and batch_tokens {batch_tokens} must be positive.')
    tokenizer = translation.get_tokenizer(self.data)
    sources = [encode_source(tokenizer, t, int(self.data.max_length)) for t in texts]
    run = self._decoder(beam_size, alpha)
    hypotheses = [''] * len(texts)
    for indices, ids in length_batches(sources, batch_tokens, self.devices):
      # Every process holds the whole batch here (multi-process: its slice would be given).
      tokens = np.asarray(jax.device_get(run(params, ids)))
      for row, i in enumerate(indices):
        hypotheses[i] = translation.decode(tokenizer, tokens[row]).replace('\n', ' ')
    return hypotheses

  def translate_split(self, params, split: str, *, limit: int = 0
                      ) -> tuple[list[str], list[str], list[str]]:
    """(sources, hypotheses, references) of `split` (the first `limit` pairs if limit > 0)."""
    records = data.DATASETS[self.data.name].source(self.data, split)
    count = len(records) if limit <= 0 else min(limit, len(records))
    pairs = [translation.record_texts(records[i], self.data) for i in range(count)]
    sources = [src for src, _ in pairs]
    return sources, self.translate(params, sources), [ref for _, ref in pairs]

  def metrics(self, params, split: str, output_path: str | None = None) -> dict[str, Any]:
    """BLEU metrics of `split`: all sentences (or decode.max_sentences) when decode.bleu_splits
    names it; the first decode.validation_sentences of 'validation' otherwise; else {}.
    `output_path`: where the hypotheses go, a line each."""
    decode = self.decode
    if split in tuple(decode.bleu_splits):
      limit = int(decode.max_sentences)
    elif split == 'validation' and int(decode.validation_sentences) > 0:
      limit = int(decode.validation_sentences)
    else:
      return {}
    _, hypotheses, references = self.translate_split(params, split, limit=limit)
    if output_path:
      write_lines(output_path, hypotheses)
    out = bleu_scores(hypotheses, references, self.data.target_language,
                      str(decode.tokenized_bleu))
    return {**out, 'decoded_sentences': len(hypotheses)}
