"""The prose of the package and benchmarks/ says what and why, once: not when, not how fast, not
louder.

Docstrings and comments rot when they carry dates, commit ids or timings measured on one machine:
those belong in docs/results/*.md (each figure with its machine, command and commit) and
CHANGELOG.md. Nor do they shout: no "the one X" or capitalised words for emphasis, no "rooms" for
modules, and the one-line error contract is stated in poolformers_jax/errors.py, not restated
wherever an error is raised. This test reads every comment and docstring (tokenize + ast, no
import) and names each offence as file:line.
"""
from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / 'poolformers_jax'
BENCHMARKS = ROOT / 'benchmarks'

OFFENCES = {
    'a date': re.compile(r'\b(?:19|20)\d\d-[01]\d(?:-[0-3]\d)?\b'),
    # 7 to 40 lower-case hex digits with both a digit and a letter: a commit id. Hex literals
    # (0x...) and sha256 digests (64 digits) do not match.
    'a commit id': re.compile(r'\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b'),
    'a timing': re.compile(
        r'\d\s?(?:ms|us|µs)\b'                                   # 0.65 ms, 3 us
        r'|\d\s?(?:steps|examples|tokens|trees|images|records|it)/s\b'   # 16 steps/s
        r'|\d(?:\.\d+)?\s?[x×]\s+(?:faster|slower|cheaper|dearer)\b'     # 4x faster
        r'|\d(?:\.\d+)?\s?%\s+(?:faster|slower|cheaper)\b'),             # 20 % faster
}


# Saying a thing louder instead of once (issue #62, item 8).
EMPHASIS = {
    "'the one'": re.compile(r'\bthe one\b', re.IGNORECASE),
    'a capitalised word': re.compile(
        r'\b(?:THE|ONE|ONLY|ANY|ALL|BOTH|NOT|NEVER|EVERY|EACH|WITH|IS|ONCE|AFTER|BEFORE|EXACTLY'
        r'|ALWAYS)\b'),
    "'rooms'": re.compile(r'\brooms\b', re.IGNORECASE),
    # "one line per task" describes an output; "fails in one line" restates errors.py.
    'the one-line contract restated': re.compile(r'\bone[- ]line\b(?! (?:per|each)\b)',
                                                 re.IGNORECASE),
}
CONTRACT = 'poolformers_jax/errors.py'   # where the one-line contract is stated


def prose(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, text) of every comment and docstring line of a Python file."""
  source = path.read_text(encoding='utf-8')
  lines = [(token.start[0], token.string)
           for token in tokenize.generate_tokens(io.StringIO(source).readline)
           if token.type == tokenize.COMMENT]
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      doc = node.body[0] if node.body else None
      if (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
          and isinstance(doc.value.value, str)):
        text = ast.get_source_segment(source, doc.value) or ''
        lines += [(doc.value.lineno + i, line) for i, line in enumerate(text.splitlines())]
  return lines


def offences(path: pathlib.Path, root: pathlib.Path = PACKAGE.parent) -> list[str]:
  name = path.relative_to(root).as_posix()
  source = path.read_text(encoding='utf-8')
  if not any(pattern.search(source) for pattern in OFFENCES.values()):
    return []   # nothing anywhere in the file: no need to tokenize it
  return [f'{name}:{line}: {what}: {text.strip()[:100]}'
          for line, text in prose(path)
          for what, pattern in OFFENCES.items() if pattern.search(text)]


def test_prose_has_no_dates_commit_ids_or_timings():
  found = [o for path in sorted([*PACKAGE.rglob('*.py'), *BENCHMARKS.rglob('*.py')])
           for o in offences(path)]
  assert not found, ('measurements, dates and history go to docs/results/*.md or CHANGELOG.md, '
                     'not into docstrings and comments:\n' + '\n'.join(found))


def emphasis(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
  name = path.relative_to(root).as_posix()
  return [f'{name}:{line}: {what}: {text.strip()[:100]}'
          for line, text in prose(path)
          for what, pattern in EMPHASIS.items() if pattern.search(text)
          and not (what == 'the one-line contract restated' and name == CONTRACT)]


def test_prose_says_it_once_without_emphasis():
  files = sorted([*PACKAGE.rglob('*.py'), *BENCHMARKS.rglob('*.py')])
  assert len(files) > 100
  found = [o for path in files for o in emphasis(path)]
  assert not found, ('say it once, without emphasis (the one-line contract lives in '
                     f'{CONTRACT}):\n' + '\n'.join(found))


@pytest.mark.parametrize('text, what', [
    ('The one registration pattern', "'the one'"),
    ('the one place a config is completed', "'the one'"),
    ('THE parser of config words', 'a capitalised word'),
    ('drawn uniformly WITH replacement', 'a capitalised word'),
    ('The rooms (each a small module):', "'rooms'"),
    ('an unknown key fails in one line naming the closest', 'the one-line contract restated'),
    ('raises a one-line ValueError', 'the one-line contract restated'),
])
def test_the_emphasis_patterns_catch_what_they_name(text, what):
  assert [w for w, p in EMPHASIS.items() if p.search(text)] == [what]


@pytest.mark.parametrize('text', [
    'one line per task (found / missing)', 'the hypotheses, one line each', 'the only one kept',
    "XLA's 'SAME' padding", 'leaves room for the filter', 'someone', 'EOS, UNK and [MASK] ids',
    'a line style per seed', 'the last written',
])
def test_plain_prose_passes_the_emphasis_patterns(text):
  assert not [w for w, p in EMPHASIS.items() if p.search(text)]


def test_emphasis_reads_only_prose_and_spares_the_contract(tmp_path):
  package = tmp_path / 'poolformers_jax'
  package.mkdir()
  module = tmp_path / 'module.py'
  module.write_text('"""The one module."""\n'
                    "LABEL = 'THE one'   # fails in one line\n")
  contract = package / 'errors.py'
  contract.write_text('"""Bad input ends in one line."""\n')
  assert [o.split(': ')[:2] for o in emphasis(module, tmp_path)] == [
      ['module.py:2', 'the one-line contract restated'], ['module.py:1', "'the one'"]]
  assert emphasis(contract, tmp_path) == []


def test_only_comments_and_docstrings_are_read(tmp_path):
  module = tmp_path / 'module.py'
  module.write_text('"""Docstring: 15-16 steps/s."""\n'
                    "LABEL = 'took 3 ms'   # measured 2026-11-26\n"
                    'def f():\n'
                    '  """What f does.\n\n  Before c209b2a it did not."""\n')
  assert [o.split(': ')[:2] for o in offences(module, tmp_path)] == [
      ['module.py:2', 'a date'], ['module.py:1', 'a timing'], ['module.py:6', 'a commit id']]


@pytest.mark.parametrize('text, what', [
    ('(Cloud TPU pages, 2026-11)', 'a date'),
    ('before upstream commit c209b2a', 'a commit id'),
    ('each record costs ~0.65 ms', 'a timing'),
    ('15-16 steps/s on 2 cores', 'a timing'),
    ('a table lookup is ~10x faster than np.isin', 'a timing'),
])
def test_the_patterns_catch_what_they_name(text, what):
  assert [w for w, p in OFFENCES.items() if p.search(text)] == [what]


@pytest.mark.parametrize('text', [
    'Eq. 4 (sec. 3.2, Table 5)', 'eps 1e-6, 1e-12', 'max_length 4096, 16K tokens',
    'two [L, L] int32 constants would be 2 GiB', 'a 3x3 convolution, 1×1 filters',
    'sha256 of the file', 'hash 0x9e3779b9', 'the shutdown barrier (300 s)', 'float32 / bf16',
    'deadbeef', '12 x 512 x 512 = 3.1M',
])
def test_legitimate_prose_passes(text):
  assert not [w for w, p in OFFENCES.items() if p.search(text)]
