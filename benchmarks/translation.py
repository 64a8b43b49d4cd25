r"""Transformer vs CP-Transformer for translation: the columns of the ContextPool paper's Table 1
(training memory and steps/s) and decoding speed, both models in ONE process so the ratios hold.

For each of `configs/wmt14.py:base` (mixer 'softmax', standard) and `:base,cp` (CP-attention:
encoder 'contextpool' + causal decoder ContextPool), resized by the flags below:
- train step: median wall time of THE trainer's step (train/step.py: forward, backward, the
  config's Adam update) on packed rows of random tokens, after a warm-up, the runs of both
  models interleaved; steps/s and the ratio CP / standard;
- memory: XLA's compiled temp + argument bytes of that step (memory_analysis(): deterministic);
- decoding: tokens/s of jitted greedy and beam-4 decoding on the KV cache (random source, the
  untrained model decodes all max_length steps: no early EOS, so every run does the same work).

  nice -n 19 .venv/bin/python benchmarks/translation.py --output_dir /tmp/translation_bench

Defaults are a reduced Base (layers, width, FFN, heads below) that fits this 2-core CPU; pass
--num_layers 6 --emb_dim 512 --mlp_dim 2048 --num_heads 8 --batch 128 --length 256 for the real
Base size on an accelerator.
"""
import json
import os
import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

from poolformers_jax.models import seq2seq_decode
from poolformers_jax.train import cli, config_utils, state as state_lib, step as step_lib
from poolformers_jax.train.setup import make_setup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', None, 'Where translation.json is written.')
flags.DEFINE_integer('num_layers', 2, 'Layers of the encoder and of the decoder.')
flags.DEFINE_integer('emb_dim', 256, 'Width.')
flags.DEFINE_integer('mlp_dim', 1024, 'Feed-forward width.')
flags.DEFINE_integer('num_heads', 4, 'Heads.')
flags.DEFINE_integer('vocab', 8000, 'Shared vocabulary.')
flags.DEFINE_integer('batch', 16, 'Packed rows per training step.')
flags.DEFINE_integer('length', 64, 'Tokens per row (source and target).')
flags.DEFINE_integer('repeats', 5, 'Timed runs (median).')
flags.DEFINE_integer('decode_batch', 8, 'Sentences decoded at once.')
flags.DEFINE_integer('decode_length', 32, 'Tokens decoded per sentence.')


def _setup(cp: bool):
  """configs/wmt14.py:base[,cp] at the flags' sizes, on one device, without the data."""
  config = cli.load_config_file(os.path.join(ROOT, 'configs', 'wmt14.py') + (':base,cp' if cp
                                                                              else ':base'))
  config = config_utils.override(config, **{
      'model.num_layers': FLAGS.num_layers, 'model.emb_dim': FLAGS.emb_dim,
      'model.mlp_dim': FLAGS.mlp_dim, 'model.num_heads': FLAGS.num_heads,
      'data.vocab_size': FLAGS.vocab, 'data.max_length': FLAGS.length,
      'batch_size': FLAGS.batch, 'num_devices': 1})
  return make_setup(config, need_files=False)


def _packed_batch(rng: np.random.Generator) -> dict:
  """Rows of sentences of 8..24 tokens, packed back to back (segment ids and positions)."""
  out = {k: np.zeros((FLAGS.batch, FLAGS.length), np.int32) for k in (
      'inputs', 'targets', 'inputs_segment_ids', 'targets_segment_ids', 'inputs_positions',
      'targets_positions')}
  for key in ('inputs', 'targets'):
    for row in range(FLAGS.batch):
      start, seg = 0, 1
      while True:
        n = int(rng.integers(8, 25))
        if start + n > FLAGS.length:
          break
        out[key][row, start:start + n] = rng.integers(3, FLAGS.vocab, n)
        out[f'{key}_segment_ids'][row, start:start + n] = seg
        out[f'{key}_positions'][row, start:start + n] = np.arange(n)
        start, seg = start + n, seg + 1
  return {k: jnp.asarray(v) for k, v in out.items()}


def _interleaved_medians(calls: dict) -> dict:
  """Median seconds of each `name -> (fn, args)`, the runs of all names interleaved, so a load
  that changes during the benchmark hits every model alike (the ratios are what we report)."""
  for fn, args in calls.values():
    jax.block_until_ready(fn(*args))                    # warm-up (compiled already)
  times = {name: [] for name in calls}
  for _ in range(FLAGS.repeats):
    for name, (fn, args) in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(*args))
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(t) for name, t in times.items()}


def build(cp: bool, batch: dict) -> dict:
  """The compiled trainer step (step.compile_train_step) and decoders of one model, with their
  arguments and memory."""
  setup = _setup(cp)
  compiled = step_lib.compile_train_step(setup)
  state = state_lib.create_train_state(setup.model, setup.tx, setup.info, jax.random.PRNGKey(0),
                                       setup.mesh)
  params = jax.tree.map(jnp.copy, state.params)   # the decoders' own: the step donates the state
  steps = compiled.runner(state, setup.mesh, jax.random.PRNGKey(1))
  src = jnp.asarray(np.random.default_rng(2).integers(3, FLAGS.vocab, (FLAGS.decode_batch, 24)),
                    jnp.int32)
  calls = {'train': (steps, (batch,))}
  for name, beam in (('greedy', 1), ('beam4', 4)):
    calls[name] = (seq2seq_decode.make_translate(setup.model, FLAGS.decode_length,
                                                 beam_size=beam, alpha=0.6), (params, src))
  return {'calls': calls,
          'params': state_lib.param_count(params),
          'train_temp_bytes': compiled.memory['temp'],
          'train_argument_bytes': compiled.memory['argument']}


def measure(models: dict) -> dict:
  calls = {(m, c): call for m, built in models.items() for c, call in built['calls'].items()}
  seconds = _interleaved_medians(calls)
  out = {}
  for m, built in models.items():
    step = seconds[(m, 'train')]
    out[m] = {k: v for k, v in built.items() if k != 'calls'}
    out[m].update(train_step_seconds=step, steps_per_second=1.0 / step, decode={
        name: {'seconds': seconds[(m, name)],
               'tokens_per_second': FLAGS.decode_batch * FLAGS.decode_length / seconds[(m, name)]}
        for name in ('greedy', 'beam4')})
  return out


def main(argv):
  del argv
  batch = _packed_batch(np.random.default_rng(0))
  results = measure({'standard': build(False, batch), 'cp': build(True, batch)})
  std, cp = results['standard'], results['cp']
  results['ratios_cp_over_standard'] = {
      'steps_per_second': cp['steps_per_second'] / std['steps_per_second'],
      'train_temp_bytes': cp['train_temp_bytes'] / std['train_temp_bytes'],
      'greedy_tokens_per_second': (cp['decode']['greedy']['tokens_per_second']
                                   / std['decode']['greedy']['tokens_per_second']),
      'beam4_tokens_per_second': (cp['decode']['beam4']['tokens_per_second']
                                  / std['decode']['beam4']['tokens_per_second']),
  }
  results['setup'] = {k: getattr(FLAGS, k) for k in (
      'num_layers', 'emb_dim', 'mlp_dim', 'num_heads', 'vocab', 'batch', 'length', 'repeats',
      'decode_batch', 'decode_length')}
  results['setup']['devices'] = str(jax.devices())
  text = json.dumps(results, indent=2, sort_keys=True)
  print(text)
  if FLAGS.output_dir:
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    with open(os.path.join(FLAGS.output_dir, 'translation.json'), 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  app.run(main)
