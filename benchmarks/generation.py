r"""Generation speed of the character LM against the length of the context it continues: tokens/s
of `lm_decode.continue_text` (greedy, batch 1) after `--contexts` symbols, for each mixer, all in
one process so the ratios hold.

For each mixer and context C: the cache sized for C + `--tokens` inputs, every cache index set to
C (the values in the cache do not change the work of a step; the prefill of C symbols is not
timed), then `--tokens` tokens drawn and fed back in one jitted scan; the median wall time of
`--repeats` runs, the runs of every (mixer, context) interleaved. Also, deterministic: the cache's
bytes, the scan's compiled temp bytes (memory_analysis()) and XLA's flop count of the compiled
scan (cost_analysis(), which counts a loop's body once: the flops of one step). The ratio
tokens/s at the shortest context / at the longest is 1 for a mixer whose step does not depend on
the length (linear).

  nice -n 19 .venv/bin/python benchmarks/generation.py --output_dir /tmp/generation

The model: configs/enwik8.py's `small` size (2 layers, width 128, 4 heads, FFN 512, bytes).
"""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from flax import traverse_util

from poolformers_jax.models import lm_decode
from poolformers_jax.models.lm import CharTransformerLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # benchmarks/
import step_runner  # noqa: E402  (benchmarks/step_runner.py)

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', None, 'Where generation.json is written.')
flags.DEFINE_list('mixers', ['linear', 'softmax'], 'Causal mixers to measure.')
flags.DEFINE_list('contexts', ['1024', '65536'], 'Symbols before the generated ones.')
flags.DEFINE_integer('tokens', 64, 'Tokens generated per timed run.')
flags.DEFINE_integer('repeats', 5, 'Timed runs (median).')
flags.DEFINE_integer('num_layers', 2, 'Layers.')
flags.DEFINE_integer('emb_dim', 128, 'Width.')
flags.DEFINE_integer('num_heads', 4, 'Heads.')
flags.DEFINE_integer('mlp_dim', 512, 'Feed-forward width.')


def _at(cache, position: int):
  """The cache with every step index at `position`."""
  flat = traverse_util.flatten_dict(cache)
  return traverse_util.unflatten_dict({
      k: jnp.full_like(v, position) if k[-1] == 'index' else v for k, v in flat.items()})


def build(mixer: str, context: int):
  """(run: () -> tokens, {cache_bytes, temp_bytes, step_flops}) for `mixer` after `context`
  symbols."""
  model = CharTransformerLM(vocab_size=257, num_layers=FLAGS.num_layers, emb_dim=FLAGS.emb_dim,
                            num_heads=FLAGS.num_heads, mlp_dim=FLAGS.mlp_dim, mixer=mixer)
  decoder = lm_decode.decoder_of(model)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))['params']
  cache = _at(lm_decode.init_cache(decoder, 1, context + FLAGS.tokens), context)
  token, key = jnp.ones((1,), jnp.int32), jax.random.PRNGKey(0)

  def generate(params, cache, token):
    return lm_decode.continue_text(decoder, params, cache, token, context, FLAGS.tokens, key,
                                   temperature=0.0)

  compiled = jax.jit(generate).lower(params, cache, token).compile()
  cost = step_runner.cost_of(compiled)
  sizes = {'cache_bytes': sum(x.nbytes for x in jax.tree.leaves(cache)),
           'temp_bytes': compiled.memory_analysis().temp_size_in_bytes,
           'step_flops': float(cost['flops'])}
  run = lambda: compiled(params, cache, token)
  jax.block_until_ready(run())   # warm-up
  return run, sizes


def main(argv):
  del argv
  contexts = [int(c) for c in FLAGS.contexts]
  cases = {(m, c): build(m, c) for m in FLAGS.mixers for c in contexts}
  seconds = step_runner.interleaved_medians({case: run for case, (run, _) in cases.items()},
                                            FLAGS.repeats)
  results = {}
  for (mixer, context), (_, sizes) in cases.items():
    results.setdefault(mixer, {})[str(context)] = {
        'tokens_per_s': FLAGS.tokens / seconds[(mixer, context)], **sizes}
  for rows in results.values():
    speeds = [rows[str(c)]['tokens_per_s'] for c in contexts]
    rows['speed_ratio_shortest_over_longest'] = speeds[0] / speeds[-1]
  results['setup'] = {k: getattr(FLAGS, k) for k in (
      'mixers', 'contexts', 'tokens', 'repeats', 'num_layers', 'emb_dim', 'num_heads',
      'mlp_dim')}
  results['setup']['devices'] = str(jax.devices())
  text = json.dumps(results, indent=2, sort_keys=True, default=np.asarray)
  print(text)
  if FLAGS.output_dir:
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    with open(os.path.join(FLAGS.output_dir, 'generation.json'), 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  step_runner.run_absl(main)
