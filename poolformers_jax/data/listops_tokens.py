"""ListOps's fixed vocabulary and its two tokenizers: what the reader (listops.py) and the
generator (generators/listops.py) share.

The official files write a tree with the parentheses of its binary nesting,
`[MAX 2 9 ]` -> `( ( ( [MAX 2 ) 9 ) ] )`, and tokens are whitespace-split.

Decisions where the official code is loose:
- The vocabulary is fixed here (the LRA code built it at run time from a Python set, so ids
  changed between runs): pad=0, digits, '[MIN', '[MAX', '[MED', '[SM', ']', '(', ')'.
- Parentheses carry no information beyond ']' and the official length budget (2000) ignores
  them, so by default they are dropped when tokenising (config.data.keep_parentheses=False).
- config.data.tokenizer: 'brackets' (the default) keeps '[MAX' ... ']'; 'alphanumeric' keeps
  the runs of word characters only, as the first LRA input pipeline did (docs/data.md: which
  numbers were trained so). Here the run 'MAX' takes the id of '[MAX' (same vocabulary, same
  model shapes), and '(' ')' ']' are dropped.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

MIN, MAX, MED, SUM_MOD, END = '[MIN', '[MAX', '[MED', '[SM', ']'
OPERATORS = (MIN, MAX, MED, SUM_MOD)
PAD = '<pad>'
VOCAB = (PAD,) + tuple(str(d) for d in range(10)) + OPERATORS + (END, '(', ')')
TOKEN_TO_ID = {token: i for i, token in enumerate(VOCAB)}
PAREN_IDS = (TOKEN_TO_ID['('], TOKEN_TO_ID[')'])
NUM_CLASSES = 10
TOKENIZERS = ('brackets', 'alphanumeric')
# tfds.deprecated.text.Tokenizer (core/deprecated/text/text_encoder.py): ALPHANUM_REGEX.
_NON_WORD_RUNS = re.compile(r'\W+', flags=re.UNICODE)
# The alphanumeric runs of the official strings -> ids: 'MAX' takes the id of '[MAX'.
ALPHANUMERIC_TO_ID = {**{op[1:]: TOKEN_TO_ID[op] for op in OPERATORS},
                      **{str(d): TOKEN_TO_ID[str(d)] for d in range(10)}}
# uint8 id -> kept, as a table lookup (cheaper than np.isin): without ( ), and also without ]
_NOT_PAREN = np.ones(256, bool)
_NOT_PAREN[list(PAREN_IDS)] = False
_ALPHANUMERIC_KEPT = _NOT_PAREN.copy()
_ALPHANUMERIC_KEPT[TOKEN_TO_ID[END]] = False

TSV_FILES = {'train': 'basic_train.tsv', 'validation': 'basic_val.tsv', 'test': 'basic_test.tsv'}


def encode(tokens: Sequence[str]) -> np.ndarray:
  try:
    return np.asarray([TOKEN_TO_ID[t] for t in tokens], np.uint8)
  except KeyError as e:
    raise ValueError(f'token {e.args[0]!r} is not in the ListOps vocabulary {VOCAB}.') from None


def alphanumeric_tokens(text: str) -> list[str]:
  """`tfds.deprecated.text.Tokenizer().tokenize(text)` (alphanum_only=True, no reserved tokens),
  the 2020 LRA pipeline's: `text` split on runs of non-word characters (regex \\W+, Unicode;
  word characters are Unicode letters and digits and '_'), empty strings dropped."""
  return [t for t in _NON_WORD_RUNS.split(text) if t]


def encode_text(text: str, tokenizer: str = 'brackets') -> np.ndarray:
  """Token ids of a ListOps string as `tokenizer` reads it ('brackets': whitespace-split)."""
  if tokenizer == 'brackets':
    return encode(text.split())
  tokens = alphanumeric_tokens(text)
  try:
    return np.asarray([ALPHANUMERIC_TO_ID[t] for t in tokens], np.uint8)
  except KeyError as e:
    raise ValueError(f'alphanumeric token {e.args[0]!r} is not a ListOps operator or digit '
                     f'{sorted(ALPHANUMERIC_TO_ID)}.') from None


def decode(ids) -> str:
  return ' '.join(VOCAB[i] for i in np.asarray(ids) if i != 0)


def read_ids(ids: np.ndarray, tokenizer: str, keep_parentheses: bool) -> np.ndarray:
  """The ids `tokenizer` reads of a tree's ids with parentheses (a record's), without decoding:
  'alphanumeric' = encode_text(decode(ids), 'alphanumeric'); 'brackets' drops '(' ')' unless
  `keep_parentheses`."""
  if tokenizer == 'alphanumeric':
    return ids[_ALPHANUMERIC_KEPT[ids]]
  return ids if keep_parentheses else ids[_NOT_PAREN[ids]]
