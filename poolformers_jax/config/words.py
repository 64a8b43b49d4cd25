"""The parser of every config file's arguments (`configs/<task>.py:<word>,<word>,...`):
`parse_words` fills named slots (model family, size, ...) from comma-separated words."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Numbered:
  """The words `<prefix><n>` (e.g. L8) as one choice of a `parse_words` slot."""
  prefix: str

  def __contains__(self, word: object) -> bool:
    return (isinstance(word, str) and word.startswith(self.prefix)
            and word[len(self.prefix):].isdigit())

  def __repr__(self) -> str:
    return f'{self.prefix}<n>'

  def number(self, word: str | None) -> int | None:
    return int(word[len(self.prefix):]) if word else None


@dataclasses.dataclass(frozen=True)
class NumberList:
  """The words `<prefix><n>-<n>-...` (e.g. rates2-8-32: positive integers) as one choice."""
  prefix: str

  def __contains__(self, word: object) -> bool:
    if not (isinstance(word, str) and word.startswith(self.prefix)):
      return False
    parts = word[len(self.prefix):].split('-')
    return all(p.isdigit() and int(p) > 0 for p in parts)

  def __repr__(self) -> str:
    return f'{self.prefix}<n>-<n>-...'

  def numbers(self, word: str | None) -> tuple[int, ...] | None:
    return tuple(int(p) for p in word[len(self.prefix):].split('-')) if word else None


Choices = Sequence[str] | Numbered | NumberList


def parse_words(arg: str | None, slots: Mapping[str, tuple[str, Choices]],
                example: str) -> dict[str, str | None]:
  """'ponet,small' -> {'family': 'ponet', 'size': 'small'}: each comma-separated word fills the
  slot whose choices hold it (later words win); unfilled slots are None.

  slots: slot -> (what it is, its choices), e.g. {'size': ('a size', SIZES)}; choices are words,
  `Numbered('L')` (L1, L2, ...) or `NumberList('rates')` (rates2-8-32, ...). A word no slot holds
  fails naming every slot's choices and an `example`."""
  filled: dict[str, str | None] = dict.fromkeys(slots)
  for word in filter(None, (arg or '').replace(' ', '').split(',')):
    slot = next((s for s, (_, choices) in slots.items() if word in choices), None)
    if slot is None:
      show = lambda c: repr(c) if isinstance(c, (Numbered, NumberList)) else str(list(c))
      what = [f'{desc} {show(choices)}' for desc, choices in slots.values()]
      alternatives = (f'neither {what[0]} nor {what[1]}' if len(what) == 2 else
                      'not ' + ', '.join(what[:-1]) + f' or {what[-1]}' if len(what) > 2 else
                      f'not {what[0]}')
      kinds = ' / '.join(desc.split(' ', 1)[-1] for desc, _ in slots.values())
      raise ValueError(f'unknown {kinds} {word!r}: config argument {word!r} is {alternatives}; '
                       f'e.g. {example}.')
    filled[slot] = word
  return filled
