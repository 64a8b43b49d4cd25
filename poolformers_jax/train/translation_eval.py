"""BLEU of a translation model on a split: decode (beam search on the KV cache, sharded over the
data axis), detokenize with the shared SentencePiece model, score against the raw references.

Two numbers, both from the `sacrebleu` package:
- `bleu`: sacreBLEU on detokenized text (13a tokenization, case-sensitive; signature reported
  as `bleu_signature`), the number to compare across papers today.
- `tokenized_bleu`: the paper-style number of Vaswani et al. / tensor2tensor's get_ende_bleu.sh:
  hypothesis and reference tokenized (here by sacreBLEU's 13a tokenizer, a close stand-in for the
  Moses tokenizer, which is not a dependency), for EN-DE with compound splitting (every
  `a-b` inside a word becomes `a ##AT##-##AT## b`), then BLEU on those tokens (tokenize='none').
  The ContextPool paper's Table 4 numbers are of this kind.
"""
from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np

from poolformers_jax import data
from poolformers_jax.data import translation
from poolformers_jax.models.seq2seq_decode import make_translate
from poolformers_jax.train import sharding

_COMPOUND = re.compile(r'(\S)-(\S)')


def split_compounds(text: str) -> str:
  """tensor2tensor's compound splitting for German BLEU, one pass of the perl
  `s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g` (so a-b-c -> a ##AT##-##AT## b-c, as there)."""
  return _COMPOUND.sub(r'\1 ##AT##-##AT## \2', text)


def bleu_scores(hypotheses: list[str], references: list[str], target_language: str) -> dict[str, Any]:
  """sacreBLEU (detokenized) and paper-style tokenized BLEU of hypotheses vs references."""
  from sacrebleu.metrics import BLEU
  from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
  bleu = BLEU()
  detok = bleu.corpus_score(hypotheses, [references])
  tokenize = Tokenizer13a()
  prepare = lambda t: tokenize(t)
  if target_language == 'de':
    prepare = lambda t: split_compounds(tokenize(t))
  tokenized = BLEU(tokenize='none', force=True).corpus_score(
      [prepare(h) for h in hypotheses], [[prepare(r) for r in references]])
  return {'bleu': detok.score, 'tokenized_bleu': tokenized.score,
          'bleu_signature': str(bleu.get_signature())}


def translate_split(setup, state, split: str, *, limit: int = 0) -> tuple[list[str], list[str],
                                                                          list[str]]:
  """(sources, hypotheses, references) of `split` (the first `limit` pairs if limit > 0)."""
  config = setup.config
  decode = config.decode
  data_config = config.data
  tokenizer = translation.get_tokenizer(data_config)
  records = data.DATASETS[data_config.name].source(data_config, split)
  count = len(records) if limit <= 0 else min(limit, len(records))
  batch_size = int(decode.batch_size)
  sharding.check_batch_size(batch_size, setup.mesh, 'config.decode.batch_size')
  run = make_translate(setup.model, int(decode.max_length), int(decode.beam_size),
                       float(decode.alpha),
                       in_shardings=(setup.state_shardings.params,
                                     sharding.batch_sharded(setup.mesh)),
                       out_shardings=sharding.replicated(setup.mesh))
  sources, hypotheses, references = [], [], []
  for start in range(0, count, batch_size):
    pairs = [translation.record_texts(records[i], data_config)
             for i in range(start, min(start + batch_size, count))]
    ids = np.zeros((batch_size, data_config.max_length), np.int32)   # padded rows: all zeros
    for row, (src, _) in enumerate(pairs):
      ids[row] = data.base.fit_length(translation.encode(tokenizer, src),
                                      data_config.max_length, 'truncate')
    # Every process holds the whole batch here (multi-process: its slice would be given instead).
    tokens = np.asarray(jax.device_get(run(state.params, ids)))
    for row, (src, ref) in enumerate(pairs):
      sources.append(src)
      references.append(ref)
      hypotheses.append(translation.decode(tokenizer, tokens[row]))
  return sources, hypotheses, references


def bleu_metrics(setup, state, split: str) -> dict[str, Any]:
  """BLEU metrics of `split` when config.decode.bleu_splits names it, else {}."""
  decode = setup.config.decode
  if split not in tuple(decode.bleu_splits):
    return {}
  _, hypotheses, references = translate_split(setup, state, split,
                                              limit=int(decode.max_sentences))
  out = bleu_scores(hypotheses, references, setup.config.data.target_language)
  return {**out, 'decoded_sentences': len(hypotheses)}
