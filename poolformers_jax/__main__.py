"""`python -m poolformers_jax <program> [flags]`, and the console script `poolformers-jax`: runs
`poolformers_jax.<program>.main`, as `python -m poolformers_jax.<program> [flags]` does.

  train        train a config (`--config lra_listops:ponet,tiny --workdir DIR`)     [train]
  eval         evaluate a run's checkpoint                                          [train]
  summary      parameters, MACs, training-step memory of a config                   [train]
  reproduce    an LRA table or PoNet's GLUE table in one command                    [train]
  average      average a run's last checkpoints                                     [train]
  translate    translate sentences with a WMT14 run                                 [train,text]
  generate     continue a text with a character LM run (enwik8, text8)              [train]
  router_load  where AdaMRA's routers send the tokens of a run                      [train]
  convert      official PyTorch weights <-> our checkpoints                         [convert]
(the pip extra each needs: docs/install.md).
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

PROGRAMS = ('train', 'eval', 'summary', 'reproduce', 'average', 'translate', 'generate',
            'router_load', 'convert')


def main(argv: Sequence[str] | None = None) -> None:
  """`poolformers-jax <program> [flags]`."""
  argv = list(sys.argv if argv is None else argv)
  if len(argv) < 2 or argv[1] not in PROGRAMS:
    given = f'unknown program {argv[1]!r}; ' if len(argv) > 1 and argv[1] not in (
        '-h', '--help') else ''
    sys.stderr.write(f'{"error: " if given else ""}{given}usage: poolformers-jax '
                     f'<{"|".join(PROGRAMS)}> [flags]  (<program> --help for its flags)\n')
    sys.exit(2 if given or len(argv) < 2 else 0)
  program = importlib.import_module(f'poolformers_jax.{argv[1]}')
  program.main([f'poolformers-jax {argv[1]}', *argv[2:]])


if __name__ == '__main__':   # imported (pkgutil walks), it runs nothing
  main()
