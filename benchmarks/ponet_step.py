r"""PoNet's LRA-Text training step as a plain `jax.jit`, timed for one or more source trees.

The step: `configs/lra_text.py:ponet` at the paper's size (2 layers of width 64, 2 heads, FFN
128, `segment_num` 4096 at 4096 tokens, learned positions), built by `build_model(config.model)`;
one batch of `--batch` rows of `--length` tokens, the first `--real_tokens` random bytes and the
rest padding (LRA text: 4000 bytes padded to 4096); loss = mean cross-entropy with dropout on,
its gradient and an AdamW update, all in one `jax.jit` (no trainer: no mesh, no accumulator, no
step transforms, so what is timed is the model and its mixer).

`--trees name=path,...`: each tree's `poolformers_jax` (and its configs/lra_text.py) runs in a
process of its own (PYTHONPATH=path), compiled once; the processes then take turns, one round of
`--steps` timed steps each (A B A B ...), so load changes on a shared machine hit every tree
alike. Reported per tree: the median of every timed step (wall clock and the CPU time of the
process), each round's medians, and what XLA's analysis of the compiled step says (flops, bytes
accessed, temporary bytes: deterministic, unlike the times). Compare two commits with a
worktree of the old one:

  git worktree add /tmp/ponet_old <an older commit>
  python benchmarks/ponet_step.py --trees old=/tmp/ponet_old,new=. --rounds 3 \
      --output /tmp/ponet_step.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

RESULT = 'RESULT '   # a child's JSON line on stdout


def serve(args) -> None:
  """The child: builds and compiles the step, then times a round per 'time' line on stdin."""
  import importlib.util

  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax

  import poolformers_jax
  from poolformers_jax.models import build_model

  root = os.path.dirname(os.path.dirname(os.path.abspath(poolformers_jax.__file__)))
  spec = importlib.util.spec_from_file_location('lra_text', os.path.join(root, 'configs',
                                                                         'lra_text.py'))
  lra_text = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(lra_text)
  config = lra_text.get_config('ponet').unlock()
  config.model.update(vocab_size=args.vocab_size, num_classes=2, max_length=args.length)
  # segments of the paper's length (4096 tokens: 4096 segments), scaled with --length
  task = lra_text.TASK
  config.model.mixer_kwargs.segment_num = max(task.segment_num * args.length // task.length, 1)
  model = build_model(config.model)

  ids = np.random.default_rng(0).integers(1, 257, (args.batch, args.length)).astype(np.int32)
  ids[:, args.real_tokens:] = 0
  tokens, labels = jnp.asarray(ids), jnp.arange(args.batch, dtype=jnp.int32) % 2
  params = model.init(jax.random.PRNGKey(0), tokens)['params']
  tx = optax.adamw(1e-4, weight_decay=0.01)

  def loss_fn(params, key):
    logits = model.apply({'params': params}, tokens, deterministic=False, rngs={'dropout': key})
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  def step(params, opt_state, key):
    loss, grads = jax.value_and_grad(loss_fn)(params, key)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  start = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params),
                                                       jax.random.PRNGKey(1)).compile()
  compile_s = time.perf_counter() - start
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost   # jax < 0.4.36: one per device
  state = [params, tx.init(params)]
  count = [0]

  def run() -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    state[0], state[1], loss = compiled(*state, jax.random.PRNGKey(count[0]))
    jax.block_until_ready(loss)
    count[0] += 1
    return time.perf_counter() - wall, time.process_time() - cpu

  for _ in range(args.warmup):
    run()
  info = dict(package=poolformers_jax.__file__, compile_s=round(compile_s, 2),
              parameters=int(sum(x.size for x in jax.tree.leaves(params))),
              flops=cost.get('flops'), bytes_accessed=cost.get('bytes accessed'),
              temp_bytes=compiled.memory_analysis().temp_size_in_bytes,
              jax=jax.__version__, xla_flags=os.environ.get('XLA_FLAGS'))
  print(RESULT + json.dumps(info), flush=True)
  for line in sys.stdin:
    if line.strip() != 'time':
      break
    times = [run() for _ in range(args.steps)]
    print(RESULT + json.dumps({'wall_ms': [w * 1e3 for w, _ in times],
                               'cpu_ms': [c * 1e3 for _, c in times]}), flush=True)


def reply(child: subprocess.Popen) -> dict:
  for line in child.stdout:
    if line.startswith(RESULT):
      return json.loads(line[len(RESULT):])
  raise RuntimeError(f'a child ended without a result (exit {child.wait()}); see its stderr.')


def main() -> None:
  if '--serve' in sys.argv:   # a child: its tree's package, whatever the parent imported
    parser = argparse.ArgumentParser()
  else:
    from poolformers_jax import errors
    parser = errors.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--trees', default='this=' + os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), help='name=path,...: the source trees to time.')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=5, help='timed steps per round')
  parser.add_argument('--warmup', type=int, default=2, help='untimed steps after compiling')
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--length', type=int, default=4096)
  parser.add_argument('--real_tokens', type=int, default=4000)
  parser.add_argument('--vocab_size', type=int, default=257)
  parser.add_argument('--output', default=None, help='a JSON file for every time measured')
  parser.add_argument('--serve', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.serve:
    serve(args)
    return
  trees = dict(item.split('=', 1) for item in args.trees.split(','))
  children, report = {}, {'command': ' '.join(sys.argv), 'machine': platform.processor() or
                          platform.machine(), 'cpus': os.cpu_count(), 'trees': {}}
  forwarded = [f'--{k}={getattr(args, k)}' for k in ('steps', 'warmup', 'batch', 'length',
                                                    'real_tokens', 'vocab_size')]
  for name, path in trees.items():   # one at a time: compiling is not timed, but it loads the CPU
    env = dict(os.environ, PYTHONPATH=os.path.abspath(path))
    children[name] = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--serve',
                                       *forwarded], env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
    report['trees'][name] = dict(path=os.path.abspath(path), **reply(children[name]), rounds=[])
  for r in range(args.rounds):
    for name, child in children.items():
      child.stdin.write('time\n')
      child.stdin.flush()
      got = reply(child)
      report['trees'][name]['rounds'].append(got)
      print(f'round {r + 1} {name}: wall {statistics.median(got["wall_ms"]):.1f} ms, '
            f'cpu {statistics.median(got["cpu_ms"]):.1f} ms', flush=True)
  for child in children.values():
    child.stdin.close()
    child.wait()
  for name, tree in report['trees'].items():
    for clock in ('wall_ms', 'cpu_ms'):
      tree[f'median_{clock}'] = statistics.median(t for r in tree['rounds'] for t in r[clock])
    print(f'{name}: median wall {tree["median_wall_ms"]:.1f} ms, cpu {tree["median_cpu_ms"]:.1f} '
          f'ms over {args.rounds} x {args.steps} steps; compiled: {tree["flops"]:.0f} flops, '
          f'{tree["bytes_accessed"]:.0f} bytes accessed, {tree["temp_bytes"]} temp bytes; '
          f'{tree["parameters"]} parameters')
  if args.output:
    with open(args.output, 'w') as f:
      json.dump(report, f, indent=1)


if __name__ == '__main__':
  main()
