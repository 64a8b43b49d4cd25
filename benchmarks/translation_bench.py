r"""Transformer vs CP-Transformer for translation: the columns of the ContextPool paper's Table 1
(training memory and steps/s) and decoding speed, both models in one process so the ratios hold.

For each of `configs/wmt14.py:base` (mixer 'softmax', standard) and `:base,cp` (CP-attention:
encoder 'contextpool' + causal decoder ContextPool), resized by the flags below:
- train step: median wall time of the trainer's step on packed rows of random tokens, after a
  warm-up, the runs of both models interleaved; steps/s and the ratio CP / standard;
- memory: XLA's compiled temp + argument bytes of that step (memory_analysis(): deterministic);
- decoding, before / after (the ratio of output tokens/s in this one process): greedy and beam-4
  translation of `--decode_sentences` random sources of 4..60 tokens, whose EOS logit is raised
  from the source length on (every run outputs the same tokens).
    before: sources in input order, `--decode_batch` per batch, each padded to
            `--decode_pad_length` (the data max_length of the real config), decode length fixed
            to it, cross-attention keys/values written inside the step (the decoder as it was);
    after:  tasks/translation.py's path: sources sorted by length, batches of at most
            `--batch_tokens` padded to length buckets, caches sized to source length + 50,
            cross-attention keys/values projected once.
  `before_cross_kv_projections`: how many of the before decoder's per-step cross-attention
  key/value projections XLA moved out of the decoding loop (compiled once per batch anyway).

  nice -n 19 .venv/bin/python benchmarks/translation_bench.py --output_dir /tmp/translation_bench

Defaults are a reduced Base (layers, width, FFN, heads below) that fits this 2-core CPU; pass
--num_layers 6 --emb_dim 512 --mlp_dim 2048 --num_heads 8 --batch 128 --length 256 for the real
Base size on an accelerator.
"""
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from poolformers_jax import config as config_lib, errors
from poolformers_jax.models import seq2seq_decode
from poolformers_jax.models.seq2seq import EOS_ID, TransformerSeq2Seq
from poolformers_jax.tasks.translation import length_batches
from poolformers_jax.trainer import setup as setup_lib, step as step_lib
from poolformers_jax.trainer.setup import setup_with_config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import step_runner  # noqa: E402  (benchmarks/step_runner.py)

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
flags.DEFINE_integer('decode_sentences', 16, 'Sentences translated per run.')
flags.DEFINE_integer('decode_batch', 8, 'Before: sentences decoded at once.')
flags.DEFINE_integer('decode_pad_length', 256, 'Before: every source padded to this length.')
flags.DEFINE_integer('batch_tokens', None, 'After: source tokens (padding included) per batch '
                     '(default: the config\'s decode.batch_tokens, 4096).')
flags.DEFINE_bool('decode_only', False, 'Skip the training-step measurements.')
flags.DEFINE_list('models', ['standard', 'cp'], 'Which of standard, cp to measure.')


def _setup(cp: bool):
  """(config, setup) of configs/wmt14.py:base[,cp] at the flags' sizes, on one device, without
  the data."""
  config = config_lib.load_file(os.path.join(ROOT, 'configs', 'wmt14.py') + (':base,cp' if cp
                                                                              else ':base'))
  config = config_lib.override(config, **{
      'model.num_layers': FLAGS.num_layers, 'model.emb_dim': FLAGS.emb_dim,
      'model.mlp_dim': FLAGS.mlp_dim, 'model.num_heads': FLAGS.num_heads,
      'data.vocab_size': FLAGS.vocab, 'data.max_length': FLAGS.length,
      'batch_size': FLAGS.batch, 'num_devices': 1})
  return setup_with_config(config, need_files=False)


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


class EndsAtSourceLength(TransformerSeq2Seq):
  """The model with its EOS logit raised by 30 from target position `source length - 1` on:
  each output ends after as many tokens as its source has (EOS included), in both regimes."""

  def decode_logits(self, memory, inputs, decoder_inputs, targets_segment_ids, targets_positions,
                    inputs_segment_ids=None, **kwargs):
    logits = super().decode_logits(memory, inputs, decoder_inputs, targets_segment_ids,
                                   targets_positions, inputs_segment_ids, **kwargs)
    if targets_positions is None:      # cache creation (teacher-forcing shapes)
      targets_positions = jnp.arange(logits.shape[1])[None]
    lengths = jnp.sum(inputs != 0, axis=1, keepdims=True)
    ends = targets_positions >= lengths - 1
    return logits.at[..., EOS_ID].add(jnp.where(ends, 30.0, 0.0))


def _sources() -> list:
  rng = np.random.default_rng(3)
  lengths = rng.integers(4, 61, FLAGS.decode_sentences)
  return [np.concatenate([rng.integers(3, FLAGS.vocab, n - 1), [EOS_ID]]).astype(np.int32)
          for n in lengths]


def _output_tokens(tokens: np.ndarray) -> int:
  """Tokens up to and including each row's EOS."""
  ends = np.argmax(tokens == EOS_ID, axis=1)
  return int(np.sum(np.where((tokens == EOS_ID).any(1), ends + 1, tokens.shape[1])))


def decoders(model, params, sources: list, batch_tokens: int) -> dict:
  """name -> call: each translates every source and returns its output token count."""
  model = EndsAtSourceLength(**{f: getattr(model, f)
                                for f in TransformerSeq2Seq.__dataclass_fields__
                                if f not in ('parent', 'name')})
  slow = model.clone(cache_cross_attention=False)
  before_batches = []
  for start in range(0, len(sources), FLAGS.decode_batch):
    ids = np.zeros((FLAGS.decode_batch, FLAGS.decode_pad_length), np.int32)
    chunk = sources[start:start + FLAGS.decode_batch]
    for row, src in enumerate(chunk):
      ids[row, :len(src)] = src
    before_batches.append((len(chunk), ids))
  after_batches = [(len(indices), ids)
                   for indices, ids in length_batches(sources, batch_tokens, 1)]

  def regime(fn, batches):
    def run():   # the real sentences of each batch are its first rows
      return sum(_output_tokens(np.asarray(fn(params, ids))[:n]) for n, ids in batches)
    return run

  calls = {}
  for name, beam in (('greedy', 1), ('beam4', 4)):
    calls[f'{name}_before'] = regime(seq2seq_decode.make_translate(
        slow, FLAGS.decode_pad_length, beam_size=beam, alpha=0.6), before_batches)
    calls[f'{name}_after'] = regime(seq2seq_decode.make_translate(
        model, None, beam_size=beam, alpha=0.6), after_batches)
  return calls


def cross_kv_outside_loop(translate, params, ids) -> int:
  """How many cross-attention key/value projections the compiled `translate` computes in its
  entry computation, outside the decoding loop: XLA's loop-invariant code motion hoists the before
  decoder's (each fusion keeps its op_name)."""
  text = translate.lower(params, ids).compile().as_text()
  entry = text[text.index('\nENTRY'):]
  entry = entry[:entry.index('\n}')]
  return len(re.findall(r'op_name="[^"]*cross_attention/(?:key|value)/dot_general"', entry))


def build(cp: bool, batch: dict, sources: list) -> dict:
  """The compiled trainer step (step.compile_train_step) and decoders of one model, with their
  arguments and memory."""
  config, setup = _setup(cp)
  state = setup_lib.create_train_state(setup, jax.random.PRNGKey(0))
  params = jax.tree.map(jnp.copy, state.params)   # the decoders' own: the step donates the state
  calls = decoders(setup.model, params, sources,
                   FLAGS.batch_tokens or config.decode.batch_tokens)
  out = {'calls': calls, 'params': setup_lib.param_count(params)}
  before = seq2seq_decode.make_translate(setup.model.clone(cache_cross_attention=False),
                                         FLAGS.decode_pad_length, beam_size=4, alpha=0.6)
  out['before_cross_kv_projections'] = {
      'in_the_decoder': 2 * FLAGS.num_layers,
      'hoisted_out_of_the_loop_by_xla': cross_kv_outside_loop(
          before, params, np.zeros((FLAGS.decode_batch, FLAGS.decode_pad_length), np.int32))}
  if not FLAGS.decode_only:
    compiled = step_lib.compile_train_step(setup)
    run = step_runner.runner(compiled, state, setup.mesh, jax.random.PRNGKey(1))
    calls['train'] = lambda: run(batch)
    out.update(train_temp_bytes=compiled.memory['temp'],
               train_argument_bytes=compiled.memory['argument'])
  return out


def measure(models: dict) -> dict:
  calls = {(m, c): call for m, built in models.items() for c, call in built['calls'].items()}
  # First runs: compile every bucket shape, count the output tokens.
  tokens = {key: call() for key, call in calls.items() if key[1] != 'train'}
  for key, call in calls.items():
    if key not in tokens:   # the training step's first run
      jax.block_until_ready(call())
  seconds = step_runner.interleaved_medians(calls, FLAGS.repeats)
  out = {}
  for m, built in models.items():
    out[m] = {k: v for k, v in built.items() if k != 'calls'}
    if not FLAGS.decode_only:
      step = seconds[(m, 'train')]
      out[m].update(train_step_seconds=step, steps_per_second=1.0 / step)
    out[m]['decode'] = {
        name: {'seconds': seconds[(m, name)], 'output_tokens': tokens[(m, name)],
               'tokens_per_second': tokens[(m, name)] / seconds[(m, name)]}
        for name in built['calls'] if name != 'train'}
    for name in ('greedy', 'beam4'):
      assert tokens[(m, f'{name}_before')] == tokens[(m, f'{name}_after')], (m, name, tokens)
      out[m]['decode'][f'{name}_speedup_after_over_before'] = (
          seconds[(m, f'{name}_before')] / seconds[(m, f'{name}_after')])
  return out


def _ratios(std: dict, cp: dict) -> dict:
  ratios = {f'{name}_tokens_per_second': (cp['decode'][f'{name}_after']['tokens_per_second']
                                          / std['decode'][f'{name}_after']['tokens_per_second'])
            for name in ('greedy', 'beam4')}
  if not FLAGS.decode_only:
    ratios.update(steps_per_second=cp['steps_per_second'] / std['steps_per_second'],
                  train_temp_bytes=cp['train_temp_bytes'] / std['train_temp_bytes'])
  return ratios


@errors.one_line_errors
def main(argv):
  del argv
  batch = _packed_batch(np.random.default_rng(0))
  sources = _sources()
  results = measure({name: build(name == 'cp', batch, sources) for name in FLAGS.models})
  if set(FLAGS.models) == {'standard', 'cp'}:
    results['ratios_cp_over_standard'] = _ratios(results['standard'], results['cp'])
  results['setup'] = {k: getattr(FLAGS, k) for k in (
      'num_layers', 'emb_dim', 'mlp_dim', 'num_heads', 'vocab', 'batch', 'length', 'repeats',
      'decode_sentences', 'decode_batch', 'decode_pad_length', 'batch_tokens', 'models')}
  results['setup']['devices'] = str(jax.devices())
  text = json.dumps(results, indent=2, sort_keys=True)
  print(text)
  if FLAGS.output_dir:
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    with open(os.path.join(FLAGS.output_dir, 'translation.json'), 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  step_runner.run_absl(main)
