r"""Continue a text with a trained character LM (enwik8, text8): the new symbols on stdout.

  python -m poolformers_jax.generate --workdir DIR --prompt TEXT --num_tokens N
      [--temperature 1.0 --top_k K --seed 0 --checkpoint best|latest|STEP]

`load_run(DIR, checkpoint).generate(prompt, N, temperature=, top_k=, seed=)`: one token per step
on the model's cache (models/lm_decode.py); temperature 0 takes the most likely symbol each step.
A run whose config.json names modules to import (config.imports) needs --trust_imports.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

from absl import flags

from poolformers_jax import cli
from poolformers_jax.run import load_run


def _generate() -> None:
  run = load_run(flags.FLAGS.workdir, flags.FLAGS.checkpoint,
                 trust_imports=flags.FLAGS.trust_imports)
  text = run.generate(flags.FLAGS.prompt, flags.FLAGS.num_tokens,
                      temperature=flags.FLAGS.temperature, top_k=flags.FLAGS.top_k,
                      seed=flags.FLAGS.seed)
  sys.stdout.write(text + '\n')
  sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> None:
  cli.define_flags()
  flags.DEFINE_string('workdir', None, 'The training run directory (a character LM).')
  flags.DEFINE_string('checkpoint', 'best', "'best', 'latest' or a step number.")
  flags.DEFINE_string('prompt', None, 'The text to continue.')
  flags.DEFINE_integer('num_tokens', 200, 'How many symbols to generate.')
  flags.DEFINE_float('temperature', 1.0, '0: the most likely symbol each step; else the '
                     'sampling temperature.')
  flags.DEFINE_integer('top_k', None, 'Sample among the k most likely symbols (default: all).')
  flags.DEFINE_integer('seed', 0, 'Random seed of the sampling.')
  cli.define_trust_imports_flag()
  cli.start(__name__, _generate, argv, required=('workdir', 'prompt'))


if __name__ == '__main__':
  main()
