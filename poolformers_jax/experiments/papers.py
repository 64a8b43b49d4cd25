"""The papers' numbers, read from papers.json beside this file (package data):
`PAPER` (LRA test accuracy %, task -> family -> [(number, where it is from)]), `GLUE_PAPER`
(PoNet's slides, GLUE dev %: task -> (PoNet-Base, BERT-Base)) and `GLUE_PAPER_AVERAGE`."""
from __future__ import annotations

import json
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'papers.json')

with open(PATH, encoding='utf-8') as _f:
  _PAPERS = json.load(_f)

PAPER: dict[str, dict[str, list[tuple[float, str]]]] = {
    task: {family: [(float(v), str(s)) for v, s in numbers] for family, numbers in families.items()}
    for task, families in _PAPERS['lra']['tasks'].items()}
GLUE_PAPER: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    task: (tuple(models['ponet']), tuple(models['bert']))
    for task, models in _PAPERS['glue']['tasks'].items()}
GLUE_PAPER_AVERAGE = (_PAPERS['glue']['average']['ponet'], _PAPERS['glue']['average']['bert'])


def paper_text(task: str, family: str) -> str:
  numbers = PAPER.get(task, {}).get(family, [])
  return ' / '.join(f'{value:.2f} ({source})' for value, source in numbers) or 'not reported'
