r"""Translate text with a trained model: one detokenized line out per line in, same order.

  python -m poolformers_jax.translate --workdir DIR [--checkpoint best|latest|averaged|STEP]
      --input FILE|- --output FILE|- [--beam 4 --alpha 0.6 --batch_tokens N]

The run's config comes from DIR/config.json; --beam, --alpha and --batch_tokens override
config.decode. Decoding is eval.py's (beam search on the KV cache, output at most source length +
50 tokens, sources cut to config.data.max_length with EOS kept), so the same sentences give the
same translations. `-` reads stdin / writes stdout; an --output the disk cannot take gets the
translations on stdout before the error (exit code 3). A run whose config.json names modules to
import (config.imports) needs --trust_imports.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from absl import flags

from poolformers_jax import cli, config as config_lib, errors
from poolformers_jax.run import load_run


def translate_file(workdir: str, lines: list[str], *, checkpoint: str = 'best',
                   trust_imports: bool = False, **decode) -> list[str]:
  """Translations of `lines` by the `checkpoint` of `workdir` (decode: beam_size, alpha,
  batch_tokens): `load_run(workdir, checkpoint, trust_imports=).predict(lines)`."""
  config = config_lib.load_saved_config(workdir)
  if config.model.name != 'transformer_seq2seq':
    raise ValueError(f'{workdir} trained {config.model.name!r}, not a translation model.')
  return load_run(workdir, checkpoint, trust_imports=trust_imports).predict(lines, **decode)


def _translate() -> None:
  source = sys.stdin if flags.FLAGS.input == '-' else open(flags.FLAGS.input, encoding='utf-8')
  with source:
    lines = [line.rstrip('\n') for line in source]
  out = translate_file(flags.FLAGS.workdir, lines, checkpoint=flags.FLAGS.checkpoint,
                       trust_imports=flags.FLAGS.trust_imports, beam_size=flags.FLAGS.beam,
                       alpha=flags.FLAGS.alpha, batch_tokens=flags.FLAGS.batch_tokens)
  text = ''.join(line + '\n' for line in out)
  if flags.FLAGS.output != '-':
    try:
      with errors.writing(flags.FLAGS.output, os.path.dirname(os.path.abspath(flags.FLAGS.output)),
                          'the translations are printed above this line; free space and run the '
                          'same command again to save them'):
        with open(flags.FLAGS.output, 'w', encoding='utf-8') as f:
          f.write(text)
      return
    except errors.DiskFull:   # translated, not saved: printed all the same
      sys.stdout.write(text)
      sys.stdout.flush()
      raise
  sys.stdout.write(text)
  sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  flags.DEFINE_string('workdir', None, 'The training run directory.')
  flags.DEFINE_string('checkpoint', 'best',
                      "'best', 'latest', 'averaged' or a step number.")
  flags.DEFINE_string('input', '-', 'Source sentences, one per line; - = stdin.')
  flags.DEFINE_string('output', '-', 'Translations, one per line; - = stdout.')
  flags.DEFINE_integer('beam', None, 'Beam size (1 = greedy; default config.decode).')
  flags.DEFINE_float('alpha', None, 'Length penalty alpha (default config.decode).')
  flags.DEFINE_integer('batch_tokens', None, 'Source tokens (padding included) '
                       'decoded at once (default config.decode).')
  cli.define_trust_imports_flag()
  cli.start(__name__, _translate, argv, required=('workdir',))


if __name__ == '__main__':
  main()
