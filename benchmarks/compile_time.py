r"""How long the ListOps paper-setting training step of each family takes to compile, alone, on
this machine's first device: cold, from JAX's persistent compilation cache, and (on a GPU) with
XLA's autotuning lowered; then one jax.profiler trace of the slowest cold compile.

    python benchmarks/compile_time.py --output_dir runs/compile_time [--size tiny] \
        [--deadline_s 300]
    python benchmarks/compile_time.py --output_dir runs/compile_time --table

The step is train.py's (`compile_train_step`, from abstract shapes, one device) of
`configs/lra_listops.py:<family>[,<size>]`. Each measurement is its own process (XLA_FLAGS is read
at start, and a cold compile needs a process that compiled nothing):
- cold: an empty JAX_COMPILATION_CACHE_DIR, which this process fills (every entry written:
  the minimum compile time and entry size set to 0);
- cached: a second process reading that cache;
- autotune0: an empty cache and XLA_FLAGS=--xla_gpu_autotune_level=0 (GPU only; 'n/a' elsewhere);
- trace: the slowest cold family again, empty cache, inside jax.profiler.trace; the trace is
  kept as trace_<family>.tar.gz if under --trace_limit_mb (else only its size is recorded).
Resumable: each (family, setting) is one record in compile_time.json, skipped once there; the
measurements stop at --deadline_s. `--table` prints
`| family | cold s | cached s | autotune 0 s | device | commit |` (docs/accelerators.md).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

from poolformers_jax import errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = 'transformer linear ponet adamra contextpool'
SETTINGS = ('cold', 'cached', 'autotune0')
RESULTS = 'compile_time.json'


def measure(family: str, size: str) -> dict:
  """In this process: the setup of the family's config, then its training step compiled."""
  from poolformers_jax import config as config_lib, runtime  # pylint: disable=g-import-not-at-top
  runtime.configure_program()
  import jax  # pylint: disable=g-import-not-at-top

  from poolformers_jax.trainer import setup as setup_lib, step as step_lib  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  spec = f'configs/lra_listops.py:{family}' + (f',{size}' if size != 'full' else '')
  config = config_lib.override(config_lib.load_file(os.path.join(ROOT, spec)), num_devices=1)
  setup = setup_lib.make_setup(config, need_files=False)
  setup_s = time.perf_counter() - start
  start = time.perf_counter()
  step_lib.compile_train_step(setup)
  device = jax.devices()[0]
  return {'compile_s': round(time.perf_counter() - start, 3), 'setup_s': round(setup_s, 3),
          'device': f'{device.platform} {device.device_kind}', 'jax': jax.__version__,
          'xla_flags': os.environ.get('XLA_FLAGS', '')}


def _commit() -> str:
  if os.environ.get('PEER_COMMIT'):
    return os.environ['PEER_COMMIT']
  try:
    return subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return '?'


def _child(args, family: str, setting: str, cache: str, timeout: float) -> dict:
  """One measurement in a fresh process; the record, or {'error': why}."""
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache,
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')
  if setting == 'autotune0':
    env['XLA_FLAGS'] = (env.get('XLA_FLAGS', '') + ' --xla_gpu_autotune_level=0').strip()
  command = [sys.executable, __file__, '--one', family, '--size', args.size]
  if setting == 'trace':
    command += ['--trace_dir', os.path.join(args.output_dir, 'trace')]
  try:
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {'error': f'not finished in {timeout:.0f} s'}
  lines = [line for line in proc.stdout.splitlines() if line.startswith('{')]
  if proc.returncode or not lines:
    tail = (proc.stderr.strip().splitlines() or ['?'])[-1]
    return {'error': f'exit {proc.returncode}: {tail}'}
  record = json.loads(lines[-1])
  record['cache_entries'] = len(os.listdir(cache)) if os.path.isdir(cache) else 0
  return record


def _tar_trace(output_dir: str, family: str, limit_mb: float) -> dict:
  trace = os.path.join(output_dir, 'trace')
  size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(trace) for f in fs)
  path = os.path.join(output_dir, f'trace_{family}.tar.gz')
  with tarfile.open(path, 'w:gz') as tar:
    tar.add(trace, arcname=f'trace_{family}')
  shutil.rmtree(trace)
  packed = os.path.getsize(path)
  if packed > limit_mb * 2**20:
    os.remove(path)
    return {'trace_bytes': size, 'trace_file': None,
            'trace_note': f'{packed / 2**20:.1f} MiB packed, over {limit_mb} MiB: not kept'}
  return {'trace_bytes': size, 'trace_file': os.path.basename(path)}


def run(args) -> dict:
  os.makedirs(args.output_dir, exist_ok=True)
  path = os.path.join(args.output_dir, RESULTS)
  results = json.load(open(path)) if os.path.exists(path) else {'families': {}}
  results.update(size=args.size, commit=results.get('commit') or _commit())
  deadline = time.time() + args.deadline_s
  gpu = None

  def save():
    with open(path, 'w') as f:
      json.dump(results, f, indent=1)

  for setting in SETTINGS:          # every family cold first: the column that matters most
    for family in args.families.split():
      records = results['families'].setdefault(family, {})
      if setting in records and 'error' not in records[setting]:
        continue
      if setting == 'cached' and 'compile_s' not in records.get('cold', {}):
        continue
      if setting == 'autotune0':
        gpu = gpu if gpu is not None else any(
            r.get('cold', {}).get('device', '').startswith('gpu')
            for r in results['families'].values())
        if not gpu:
          records[setting] = {'na': 'not a GPU'}
          continue
      left = deadline - time.time()
      if left < args.min_left_s:
        save()
        return results
      cache = os.path.join(args.cache_dir, family.replace(',', '-') +
                           ('_autotune0' if setting == 'autotune0' else ''))
      if setting == 'cached' and not (os.path.isdir(cache) and os.listdir(cache)):
        # its cache is gone (a new call or machine): cold again, then cached
        records['cold'] = _child(args, family, 'cold', cache, left)
        left = deadline - time.time()
        if 'compile_s' not in records['cold'] or left < args.min_left_s:
          continue
      if setting != 'cached':
        shutil.rmtree(cache, ignore_errors=True)
      records[setting] = _child(args, family, setting, cache, left)
      print(f'compile_time: {family} {setting}: '
            f'{records[setting].get("compile_s", records[setting].get("error"))}', flush=True)
      save()
  colds = {f: r['cold']['compile_s'] for f, r in results['families'].items()
           if 'compile_s' in r.get('cold', {})}
  traced = 'compile_s' in results.get('trace', {})
  if colds and not traced and deadline - time.time() >= args.min_left_s:
    slowest = max(colds, key=colds.get)
    cache = os.path.join(args.cache_dir, 'trace')
    shutil.rmtree(cache, ignore_errors=True)
    record = _child(args, slowest, 'trace', cache, deadline - time.time())
    if 'compile_s' in record:
      record.update(_tar_trace(args.output_dir, slowest, args.trace_limit_mb))
    results['trace'] = dict(record, family=slowest)
    save()
  return results


def _seconds(record: dict | None) -> str:
  if not record:
    return 'not run'
  if 'na' in record:
    return 'n/a'
  return f'{record["compile_s"]:.1f}' if 'compile_s' in record else 'failed'


def table(results: dict) -> str:
  lines = ['| family | cold s | cached s | autotune 0 s | device | commit |',
           '|---|---|---|---|---|---|']
  for family, records in results['families'].items():
    device = records.get('cold', {}).get('device', '?')
    lines.append(f'| {family} | {_seconds(records.get("cold"))} | '
                 f'{_seconds(records.get("cached"))} | {_seconds(records.get("autotune0"))} | '
                 f'{device} | `{results.get("commit", "?")}` |')
  trace = results.get('trace')
  if trace and 'compile_s' in trace:
    lines += ['', f'Traced: {trace["family"]} ({trace["compile_s"]:.1f} s under the profiler; '
              + (trace['trace_file'] or trace['trace_note']) + ').']
  return '\n'.join(lines)


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--output_dir', help='compile_time.json, the trace and the caches here')
  parser.add_argument('--families', default=FAMILIES, help='config words, space-separated')
  parser.add_argument('--size', default='full', help="full (the paper's) or a size word: tiny")
  parser.add_argument('--deadline_s', type=float, default=540, help='stop measuring after this')
  parser.add_argument('--min_left_s', type=float, default=20, help='start nothing with less left')
  parser.add_argument('--cache_dir', help='the compilation caches (default OUTPUT_DIR/../cache)')
  parser.add_argument('--trace_limit_mb', type=float, default=8)
  parser.add_argument('--table', action='store_true', help='print the table of OUTPUT_DIR')
  parser.add_argument('--one', metavar='FAMILY', help=argparse.SUPPRESS)
  parser.add_argument('--trace_dir', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.one:
    if args.trace_dir:
      import jax  # pylint: disable=g-import-not-at-top
      options = jax.profiler.ProfileOptions()
      options.python_tracer_level = 0   # XLA's own passes (host TraceMe events), not every call
      with jax.profiler.trace(args.trace_dir, profiler_options=options):
        record = measure(args.one, args.size)
    else:
      record = measure(args.one, args.size)
    print(json.dumps(record), flush=True)
    return
  if not args.output_dir:
    parser.error('--output_dir is required, e.g. --output_dir runs/compile_time')
  if args.table:
    print(table(json.load(open(os.path.join(args.output_dir, RESULTS)))))
    return
  args.cache_dir = args.cache_dir or os.path.join(os.path.dirname(
      os.path.abspath(args.output_dir)), 'compile_cache')
  print(table(run(args)))


if __name__ == '__main__':
  main()
