"""lra_retrieval (LRA Retrieval, AAN document pairs as bytes; lra.py: tokens are byte + 1).

The LRA release files new_aan_pairs.{train,eval,test}.tsv in config.data.tsv_dir (no header;
columns label, id1, id2, text1, text2, split on tabs only, as the LRA code reads them); inputs
[2, max_length] bytes of the two documents, target the float label as int.
"""
from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np

from poolformers_jax.data import base, lra

FILES = {'train': 'new_aan_pairs.train.tsv', 'validation': 'new_aan_pairs.eval.tsv',
         'test': 'new_aan_pairs.test.tsv'}


def parse(line: str) -> dict:
  """{'label', 'text1', 'text2'} of a line `label id1 id2 text1 text2` of the headerless TSV."""
  fields = line.split('\t')
  if len(fields) < 5:
    raise ValueError(f'expected 5 tab-separated fields (label, id1, id2, text1, text2), got '
                     f'{len(fields)}.')
  return {'label': int(float(fields[0])), 'text1': fields[3], 'text2': fields[4]}


def line_problem(line: bytes) -> str | None:
  """What is wrong with a line's fields (a line cut short has fewer), or None; the texts are
  read when the record is."""
  fields = line.split(b'\t', 4)
  if len(fields) < 5:
    return (f'{len(fields)} tab-separated fields where a line has 5 (label, id1, id2, text1, '
            'text2): the line is cut short or damaged')
  try:
    label = float(fields[0])
  except ValueError:
    label = -1.0
  if label not in (0.0, 1.0):
    return f'the label {fields[0][:20].decode("utf-8", "replace")!r} is not 0 or 1'
  return None


@functools.lru_cache(maxsize=8)
def read_file(path: str, skip: bool = False) -> base.LineFile:
  """The records of one retrieval TSV file (indexed once per process), each line checked."""
  return base.LineFile(path, parse=parse, check=base.LineCheck(
      line_problem, 'download the LRA release again (lra_release.gz, tsv_data/)', skip))


def source(settings: RetrievalSettings, split):
  path = os.path.join(base.expand_path(settings.tsv_dir), FILES[base.check_split(split)])
  base.require_file(path, 'download the LRA release (lra_release.gz, tsv_data/) and set '
                    'config.data.tsv_dir to the folder holding new_aan_pairs.*.tsv.')
  return read_file(path, settings.skip_bad_records)


def preprocess(record, settings: RetrievalSettings, rng: np.random.Generator | None = None):
  del rng
  docs = [lra.byte_tokens(record[k], settings, 'document') for k in ('text1', 'text2')]
  return {'inputs': np.stack(docs), 'targets': np.int32(record['label'])}


@dataclasses.dataclass(frozen=True)
class RetrievalSettings(base.DataSettings):
  name: str = 'lra_retrieval'
  max_length: int = 4096          # per document
  max_tokens: int = 0             # bytes kept per document; 0 = max_length
  tsv_dir: str = base.under_data_dir('lra_release', 'tsv_data')


base.register_dataset('lra_retrieval', lra.spec(
    'lra_retrieval', source, preprocess, RetrievalSettings,
    lambda raw, _: {'text1': raw[0], 'text2': raw[1], 'label': 0}, task='retrieval', documents=2))
