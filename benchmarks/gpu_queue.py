r"""The state and status of `bash benchmarks/gpu_run.sh queue` (every pending GPU job in one
budget, resumed across calls): which jobs are done, partial or pending, what the next call does,
and the results so far as one markdown file.

    python benchmarks/gpu_queue.py --results DIR --runs RUNS \
        --group 'spt=adamra,spt contextpool,spt' --group 'positions=transformer,rotary' \
        --report OUT                     # OUT/queue.md and OUT/queue.tar
    python benchmarks/gpu_queue.py --runs RUNS --finished 'adamra,spt contextpool,spt'  # 0: all
    python benchmarks/gpu_queue.py --results DIR --sweep_complete   # exit 0: complete (--peer_done)

DIR holds the finished jobs' results (peer/: gpu_peer.*, efficiency.*; compile_time/:
compile_time.json and the trace; listops_<group>.md; util/: run_<run>.json, util.{md,json};
causal/: causal_linear_<length>.json, generation.json; longest/: efficiency.*), packed whole into
OUT/queue.tar; RUNS the ListOps run directories (the listops_*.tar packs, unpacked). `--util_runs`
and `--causal_lengths` name what those jobs hold when done.
"""
from __future__ import annotations

import json
import os
import sys
import tarfile
from collections.abc import Sequence

from poolformers_jax import errors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import causal_linear  # pylint: disable=g-import-not-at-top,wrong-import-position
import compile_time  # pylint: disable=g-import-not-at-top,wrong-import-position
import listops_column  # pylint: disable=g-import-not-at-top,wrong-import-position

# Jobs the runner cannot do yet, with the reason (listed as pending, never run).
BLOCKED = {
    'positions 6x512': 'their model (~19 M parameters: params + Adam moments ~230 MB) does not '
                       'fit the 8 x 16 MiB the device tool returns; one warm machine only',
    'pathfinder32': 'the runner trains ListOps only (a Pathfinder-32 run needs its data made by '
                    'data/generators/pathfinder.py and a task switch in gpu_run.sh)',
}


def _load(path: str) -> dict | None:
  return json.load(open(path)) if os.path.exists(path) else None


def peer_status(results: str) -> tuple[str, str]:
  report = _load(os.path.join(results, 'peer', 'gpu_peer.json'))
  if report is None:
    return 'pending', 'runs `gpu_run.sh peer` (their amp step vs ours, then the sweep)'
  runs = [r for rec in report['models'].values() for rs in rec['runs'].values() for r in rs]
  short = [r['status'] for r in runs if r['status'].startswith(('not run', 'error: killed'))]
  theirs = any(name.startswith('official') for rec in report['models'].values()
               for name in rec['runs'])
  note = '' if theirs else ' (our side only: no official code or torch)'
  if short or not runs:
    return 'partial' + note, f'runs `gpu_run.sh peer` again ({len(short)} runs cut by the budget)'
  return 'done' + note, 'nothing'


def compile_status(results: str) -> tuple[str, str]:
  report = _load(os.path.join(results, 'compile_time', compile_time.RESULTS))
  if report is None:
    return 'pending', 'compiles each family cold, cached, autotune 0, then traces the slowest'
  families = report['families']
  todo = [f'{f} {s}' for f, records in families.items() for s in compile_time.SETTINGS
          if not any(k in records.get(s, {}) for k in ('compile_s', 'na'))]
  if 'compile_s' not in report.get('trace', {}):
    todo.append('the trace')
  if todo:
    return 'partial', 'measures ' + ', '.join(todo)
  return 'done', 'nothing'


def _sweep_points(results: str) -> tuple[int, int] | None:
  report = _load(os.path.join(results, 'peer', 'efficiency.json'))
  if report is None:
    return None
  points = [p for per_length in report['results'].values() for p in per_length.values()]
  missing = [p for p in points if str(p.get('status', 'not run')).startswith(('not run',
                                                                              'error: no result'))]
  return len(points) - len(missing), len(points)


def sweep_status(results: str) -> tuple[str, str]:
  counts = _sweep_points(results)
  if counts is None:
    return 'pending', 'runs with `peer` (its stage b)'
  ran, total = counts
  if ran < total:
    return f'partial ({ran} of {total} points)', 're-runs the sweep alone (peer stage b)'
  return f'done ({total} points, in `peer`)', 'nothing'


def family_status(runs: str, family: str) -> str:
  if not os.path.isdir(os.path.join(runs, listops_column.run_dir(family))):
    return 'pending'
  r = listops_column.row(runs, family)
  if r['test'] is not None:
    return 'done'
  if r['step']:
    return f'partial (step {r["step"]})'
  pre = r['pretrain']
  return f'partial (pre-training step {pre["step"]})' if pre and pre['step'] else 'pending'


def group_status(runs: str, families: list[str]) -> tuple[str, str]:
  states = {f: family_status(runs, f) for f in families}
  if not families:
    return 'none queued', 'nothing'
  todo = [f for f, s in states.items() if s != 'done']
  text = ', '.join(f'{f}: {s}' for f, s in states.items())
  if not todo:
    return f'done ({text})', 'nothing'
  kind = 'pending' if all(states[f] == 'pending' for f in todo) and len(todo) == len(families) \
      else 'partial'
  return f'{kind} ({text})', 'trains ' + ' '.join(todo) + ' (gpu_run.sh listops)'


def util_status(results: str, util_runs: list[str]) -> tuple[str, str]:
  todo = [r for r in util_runs if not os.path.exists(os.path.join(
      results, 'util', f'run_{r.replace(":", "_")}.json'))]
  if not todo:
    return f'done ({len(util_runs)} runs)', 'nothing'
  kind = 'pending' if len(todo) == len(util_runs) else (
      f'partial ({len(util_runs) - len(todo)} of {len(util_runs)} runs)')
  return kind, 'trains and summarises ' + ' '.join(todo) + ' (benchmarks/step_utilisation.py)'


def causal_files(lengths: list[str]) -> list[str]:
  return [f'causal_linear_{n}.json' for n in lengths] + ['generation.json']


def causal_status(results: str, lengths: list[str]) -> tuple[str, str]:
  files = causal_files(lengths)
  todo = [f for f in files if not os.path.exists(os.path.join(results, 'causal', f))]
  if not todo:
    return 'done', 'nothing'
  kind = 'pending' if len(todo) == len(files) else f'partial ({len(files) - len(todo)} of ' \
      f'{len(files)} files)'
  return kind, 'measures ' + ', '.join(os.path.splitext(f)[0] for f in todo)


def longest_rows(report: dict) -> dict[str, dict]:
  """Per entry: the longest length run ('ok'), the shortest out of memory, the lengths left."""
  rows = {}
  for entry, per_length in report['results'].items():
    ok = [int(n) for n, p in per_length.items() if p.get('status') == 'ok']
    oom = [int(n) for n, p in per_length.items() if p.get('status') == 'out of memory']
    longest = max(ok, default=None)
    rows[entry] = {'longest': longest, 'point': per_length.get(str(longest), {}),
                   'first_oom': min(oom, default=None),
                   'left': [n for n in report['setup']['lengths']
                            if str(n) not in per_length or str(per_length[str(n)].get(
                                'status', 'not run')).startswith('not run')]}
  return rows


def longest_status(results: str) -> tuple[str, str]:
  report = _load(os.path.join(results, 'longest', 'efficiency.json'))
  if report is None:
    return 'pending', 'doubles each family\'s LRA-text step from 4K until it does not fit'
  left = {e: r['left'] for e, r in longest_rows(report).items() if r['left']}
  if left:
    return f'partial ({len(report["results"]) - len(left)} of {len(report["results"])} '\
        'families)', 'compiles ' + ', '.join(f'{e} from {min(n)}' for e, n in left.items())
  return 'done', 'nothing'


def longest_table(report: dict) -> str:
  mib = lambda b: '-' if b is None else f'{b / 2**20:.0f}'
  lines = ['| family | longest that fits | step MiB (compiled) | step ms | does not fit at |',
           '|---|---|---|---|---|']
  for entry, r in longest_rows(report).items():
    p = r['point']
    ms = '-' if p.get('step_ms') is None else f'{p["step_ms"]:.1f}'
    lines.append(f'| {entry} | {r["longest"] or "-"} | {mib(p.get("compiled_total_bytes"))} | '
                 f'{ms} | {r["first_oom"] or "-"} |')
  return '\n'.join(lines)


def generation_table(report: dict) -> str:
  lines = ['| mixer | context | tokens/s | cache MiB |', '|---|---|---|---|']
  for mixer, rows in report.items():
    if mixer != 'setup':
      lines += [f'| {mixer} | {n} | {p["tokens_per_s"]:.1f} | {p["cache_bytes"] / 2**20:.1f} |'
                for n, p in rows.items() if isinstance(p, dict)]
  return '\n'.join(lines)


def new_job_sections(results: str, lengths: list[str]) -> list[str]:
  """The markdown of the util, causal and longest jobs' results so far."""
  parts = []
  util = os.path.join(results, 'util', 'util.md')
  if os.path.exists(util):
    parts += ['', '## Utilisation (MFU, data wait; summary beside)', '', open(util).read().strip()]
  causal = [_load(os.path.join(results, 'causal', f)) for f in causal_files(lengths)[:-1]]
  causal = {n: p for c in causal if c for n, p in c['results'].items()}
  if causal:
    parts += ['', '## Causal: chunked against prefix sums and softmax', '',
              causal_linear.table(causal)]
  generation = _load(os.path.join(results, 'causal', 'generation.json'))
  if generation:
    parts += ['', '## Generation against context length', '', generation_table(generation)]
  longest = _load(os.path.join(results, 'longest', 'efficiency.json'))
  if longest:
    parts += ['', f'## The longest single-device step ({longest["setup"]["dtype"]}, batch '
              f'{longest["setup"]["batch"]})', '', longest_table(longest)]
  return parts


def status_rows(results: str, runs: str, groups: dict[str, list[str]],
                util_runs: Sequence[str] = (),
                lengths: Sequence[str] = ()) -> list[tuple[str, str, str]]:
  rows = [('peer', *peer_status(results)), ('compile time', *compile_status(results)),
          ('sweep', *sweep_status(results))]
  rows += [(f'listops {name}', *group_status(runs, families)) for name, families in groups.items()]
  rows += [('util', *util_status(results, list(util_runs))),
           ('causal', *causal_status(results, list(lengths))),
           ('longest', *longest_status(results))]
  rows += [(job, 'pending', f'nothing: {why}') for job, why in BLOCKED.items()]
  return rows


def report(results: str, runs: str, groups: dict[str, list[str]], out: str,
           util_runs: Sequence[str] = (), lengths: Sequence[str] = ()) -> str:
  rows = status_rows(results, runs, groups, util_runs, lengths)
  parts = ['## Queue status', '', '| job | status | the next call |', '|---|---|---|']
  parts += [f'| {job} | {state} | {todo} |' for job, state, todo in rows]
  sections = [('Side by side with the authors', os.path.join(results, 'peer', 'gpu_peer.md')),
              ('The sweep (bf16)', os.path.join(results, 'peer', 'efficiency.md'))]
  sections += [(f'ListOps: {name}', os.path.join(results, f'listops_{name}.md')) for name in groups]
  for title, path in sections[:2]:
    if os.path.exists(path):
      parts += ['', f'## {title}', '', open(path).read().strip()]
  compile_path = os.path.join(results, 'compile_time', compile_time.RESULTS)
  if os.path.exists(compile_path):
    parts += ['', '## Compile time (ListOps paper step, alone)', '',
              compile_time.table(json.load(open(compile_path)))]
  for title, path in sections[2:]:
    if os.path.exists(path):
      parts += ['', f'## {title}', '', open(path).read().strip()]
  parts += new_job_sections(results, list(lengths))
  text = '\n'.join(parts) + '\n'
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, 'queue.md'), 'w') as f:
    f.write(text)
  with tarfile.open(os.path.join(out, 'queue.tar'), 'w') as tar:
    tar.add(results, arcname='results')
  return text


@errors.one_line_errors
def main() -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--results', help='the finished jobs\' results (packed into queue.tar)')
  parser.add_argument('--runs', help='the ListOps run directories')
  parser.add_argument('--group', action='append', default=[], metavar='NAME=FAMILIES',
                      help='a ListOps group: its name and config words, space-separated')
  parser.add_argument('--report', metavar='OUT', help='write OUT/queue.md and OUT/queue.tar')
  parser.add_argument('--finished', metavar='FAMILIES', help='exit 0 if every family finished')
  parser.add_argument('--sweep_complete', action='store_true', help='exit 0 if the sweep is')
  parser.add_argument('--peer_done', action='store_true', help='exit 0 if peer is done')
  parser.add_argument('--util_runs', default='', help='the util job\'s runs, space-separated')
  parser.add_argument('--causal_lengths', default='', help='the causal job\'s lengths')
  args = parser.parse_args()
  if args.finished is not None:
    sys.exit(0 if all(family_status(args.runs, f) == 'done' for f in args.finished.split()) else 1)
  if args.peer_done:
    sys.exit(0 if peer_status(args.results)[0].startswith('done') else 1)
  if args.sweep_complete:
    counts = _sweep_points(args.results)
    sys.exit(0 if counts and counts[0] == counts[1] else 1)
  groups = {name: families.split() for name, _, families in (g.partition('=') for g in args.group)}
  print(report(args.results, args.runs, groups, args.report, args.util_runs.split(),
               args.causal_lengths.split()))


if __name__ == '__main__':
  main()
