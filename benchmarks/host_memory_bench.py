r"""What glibc's defaults cost XLA:CPU: the default ListOps train step with and without
`poolformers_jax.trainer.host_memory.keep_freed_memory()`.

Each setting runs in its own subprocess (the allocator is chosen once per process): the
compiled train step of `configs/lra_listops.py` (or `--config`), warmed up, then `--steps` steps
on a fixed batch, then `--steps` steps each followed by reading the next batch (as the loop
does). Per setting: steps/s, page faults per step and kernel seconds (/proc/self/stat around the
step-only phase). Prints a Markdown table and writes host_memory.json:

  .venv/bin/python benchmarks/host_memory_bench.py --output_dir /tmp/host_memory
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))   # step_runner

import step_runner  # noqa: E402  (benchmarks/step_runner.py)
from absl import flags  # noqa: E402

from poolformers_jax import errors  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string('config', 'configs/lra_listops.py', 'configs/<task>.py[:arg]')
flags.DEFINE_integer('steps', 200, 'Timed steps per phase.')
flags.DEFINE_string('output_dir', '/tmp/host_memory', 'Where host_memory.json goes.')
flags.DEFINE_bool('child', False, 'Internal: measure in this process and print one JSON line.')


def _faults_and_sys() -> tuple[int, float]:
  fields = open('/proc/self/stat').read().rsplit(')', 1)[1].split()
  return int(fields[7]), float(fields[12]) / os.sysconf('SC_CLK_TCK')   # minflt, stime


def measure(config_spec: str, steps: int) -> dict:
  from poolformers_jax.trainer import host_memory
  applied = host_memory.keep_freed_memory()
  import jax

  from poolformers_jax import config as config_lib, data
  from poolformers_jax.trainer import sharding
  from poolformers_jax.trainer.setup import process_slice, setup_with_config
  config, setup = setup_with_config(config_lib.load_file(config_spec))
  train_iter = data.make_train_iterator(setup.data, batch_size=setup.batch_size, seed=0,
                                        **process_slice())
  next_batch = lambda: sharding.global_batch(next(train_iter), setup.mesh)
  batch = next_batch()
  _, _, step = step_runner.trainer_step(setup)   # the trainer's step
  for _ in range(20):
    done = step(batch)
  jax.block_until_ready(done)
  faults, kernel = _faults_and_sys()
  started = time.perf_counter()
  for _ in range(steps):
    done = step(batch)
  jax.block_until_ready(done)
  step_only = steps / (time.perf_counter() - started)
  faults_after, kernel_after = _faults_and_sys()
  started = time.perf_counter()
  for _ in range(steps):
    done = step(batch)
    batch = next_batch()
  jax.block_until_ready(done)
  with_input = steps / (time.perf_counter() - started)
  return dict(keep_freed_memory=applied, step_only_steps_per_second=step_only,
              with_input_steps_per_second=with_input,
              page_faults_per_step=(faults_after - faults) / steps,
              kernel_seconds=kernel_after - kernel, step_only_seconds=steps / step_only)


@errors.one_line_errors
def main(argv):
  del argv
  if FLAGS.child:
    print('RESULT ' + json.dumps(measure(FLAGS.config, FLAGS.steps)))
    return
  rows = {}
  for name, opt_out in (('glibc defaults', '1'), ('keep_freed_memory', '')):
    env = dict(os.environ, POOLFORMERS_SYSTEM_MALLOC=opt_out)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), '--child',
                          f'--config={FLAGS.config}', f'--steps={FLAGS.steps}'],
                         env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rows[name] = json.loads(out.split('RESULT ', 1)[1].splitlines()[0])
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  result = dict(config=FLAGS.config, steps=FLAGS.steps, cpu_count=os.cpu_count(), rows=rows)
  with open(os.path.join(FLAGS.output_dir, 'host_memory.json'), 'w') as f:
    json.dump(result, f, indent=1)
  print(f'{FLAGS.config}, {FLAGS.steps} steps per phase, {os.cpu_count()} CPU cores\n')
  print('| host allocator | step alone (steps/s) | step + next batch (steps/s) | '
        'page faults / step | kernel s in the step phase |')
  print('|---|---|---|---|---|')
  for name, r in rows.items():
    print(f'| {name} | {r["step_only_steps_per_second"]:.2f} | '
          f'{r["with_input_steps_per_second"]:.2f} | {r["page_faults_per_step"]:.0f} | '
          f'{r["kernel_seconds"]:.1f} of {r["step_only_seconds"]:.1f} |')


if __name__ == '__main__':
  step_runner.run_absl(main)
