r"""Pre-training cost of PoNet vs BERT (softmax attention): steps/s and compiled memory.

The trainer's pre-training step of `configs/ponet_pretrain.py:sso` (MLM + SSO loss, AdamW with
clipping) for mixer 'ponet' and 'softmax' (BERT, `:sso,bert`) at each length, resized by the
flags, both in the same process, so the ratios are what transfers between machines:
- steps/s: 1 / median wall time of a step over `--repeats` runs after a warm-up, the two
  models' steps interleaved (the same load of a shared machine);
- memory: XLA's compiled temp bytes of the step (`memory_analysis()`), deterministic.
Under the environment's XLA_FLAGS (recorded). Defaults are a reduced size for a CPU (the paper's
PoNet-Base is 12 x 768, vocab 30522):

  nice -n 19 .venv/bin/python benchmarks/ponet_transfer.py --output_dir /tmp/ponet_transfer \
      --lengths 512,4096 --batch 2 --emb_dim 256 --num_layers 4 --vocab_size 8192
"""
import dataclasses
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from poolformers_jax import config as config_lib, data, errors
from poolformers_jax.trainer import setup as setup_lib
from poolformers_jax.trainer.setup import make_setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import step_runner  # noqa: E402  (benchmarks/step_runner.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', None, 'Where ponet_transfer.json is written.')
flags.DEFINE_list('lengths', ['512', '4096'], 'Sequence lengths.')
flags.DEFINE_integer('batch', 2, 'Sequences per step.')
flags.DEFINE_integer('emb_dim', 256, 'Width (PoNet-Base: 768).')
flags.DEFINE_integer('num_layers', 4, 'Layers (PoNet-Base: 12).')
flags.DEFINE_integer('num_heads', 4, 'Heads (PoNet-Base: 12).')
flags.DEFINE_integer('vocab_size', 8192, 'Vocabulary (BERT uncased: 30522).')
flags.DEFINE_integer('repeats', 5, 'Timed steps per point (median reported).')
flags.mark_flag_as_required('output_dir')

FAMILIES = ('ponet', 'bert')


def batch_of(length: int, batch: int, vocab: int):
  """"[CLS] A [SEP] B [SEP]" of random tokens with a segment id per 32-token "sentence", 15 % of
  the tokens to predict, an SSO label: the arrays of data/text_pretraining.py's examples."""
  rng = np.random.default_rng(0)
  ids = rng.integers(1000, vocab, (batch, length)).astype(np.int32)
  ids[:, 0], ids[:, length // 2], ids[:, -1] = 101, 102, 102
  segments = np.broadcast_to(1 + np.arange(length, dtype=np.int32) // 32, (batch, length)).copy()
  segments[:, 0] = 0
  mlm = np.where(rng.random((batch, length)) < 0.15, ids, -1).astype(np.int32)
  return {'inputs': jnp.asarray(np.stack([ids, segments], 1)),
          'targets': {'mlm': jnp.asarray(mlm), 'sso': jnp.zeros((batch,), jnp.int32)}}


def compile_step(family: str, length: int):
  """(the step to time, the batch, result dict with memory and parameter count)."""
  spec = os.path.join(ROOT, 'configs', 'ponet_pretrain.py') + (':sso,bert' if family == 'bert'
                                                                else ':sso')
  config = config_lib.override(config_lib.load_file(spec), **{
      'model.emb_dim': FLAGS.emb_dim, 'model.num_layers': FLAGS.num_layers,
      'model.num_heads': FLAGS.num_heads, 'model.mlp_dim': 4 * FLAGS.emb_dim,
      'data.max_length': length, 'batch_size': FLAGS.batch, 'num_devices': 1})
  # The data's description without a corpus, with this benchmark's vocabulary.
  info = dataclasses.replace(data.DATASETS['text_pretraining'].shapes(data.settings(config.data)),
                             vocab_size=FLAGS.vocab_size)
  setup = make_setup(config, info=info)
  compiled, state, run = step_runner.trainer_step(setup)
  batch = batch_of(length, FLAGS.batch, FLAGS.vocab_size)
  result = {'step_temp_bytes': compiled.memory['temp'],
            'params': setup_lib.param_count(state.params)}
  jax.block_until_ready(run(batch))   # warm-up
  return run, batch, result


@errors.one_line_errors
def main(argv):
  del argv
  results = {family: {} for family in FAMILIES}
  for length in (int(n) for n in FLAGS.lengths):
    steps = {family: compile_step(family, length) for family in FAMILIES}
    seconds = step_runner.interleaved_medians(
        {family: lambda run=run, batch=batch: run(batch) for family, (run, batch, _) in
         steps.items()}, FLAGS.repeats)
    for family, (_, _, point) in steps.items():
      point['steps_per_second'] = 1.0 / seconds[family]
      results[family][str(length)] = point
      print(f'{family:6s} L={length:5d} {point}', flush=True)
    ponet, bert = results['ponet'][str(length)], results['bert'][str(length)]
    ponet['speedup_vs_bert'] = ponet['steps_per_second'] / bert['steps_per_second']
    ponet['memory_ratio_to_bert'] = ponet['step_temp_bytes'] / bert['step_temp_bytes']
    print(f'L={length}: PoNet {ponet["speedup_vs_bert"]:.2f}x the steps/s of BERT, '
          f'{ponet["memory_ratio_to_bert"]:.3f}x its memory', flush=True)
    del steps
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  report = {'setup': dict(batch=FLAGS.batch, emb_dim=FLAGS.emb_dim, num_layers=FLAGS.num_layers,
                          num_heads=FLAGS.num_heads, vocab_size=FLAGS.vocab_size,
                          repeats=FLAGS.repeats, backend=jax.default_backend(),
                          device=str(jax.devices()[0]), cpu_count=os.cpu_count(),
                          xla_flags=os.environ.get('XLA_FLAGS', ''), jax=jax.__version__),
            'results': results}
  with open(os.path.join(FLAGS.output_dir, 'ponet_transfer.json'), 'w') as f:
    json.dump(report, f, indent=2)
  print(f'wrote {FLAGS.output_dir}/ponet_transfer.json')


if __name__ == '__main__':
  step_runner.run_absl(main)
