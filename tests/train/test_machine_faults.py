"""What the machine does wrong, made to happen: a full disk (a real small filesystem: a tmpfs
mounted under the test's directory), a step larger than the memory. Each ends in one line naming
the fault and the way out (errors.MachineFault, exit code 3), loses no finished checkpoint, and
the same command resumes exactly. A lost process: tests/train/test_multiprocess.py."""
import contextlib
import json
import os
import struct
import subprocess
import sys

import jax
import numpy as np
import pytest
from tiny_runs import REPO, tiny_config, tiny_overrides

from poolformers_jax import errors
from poolformers_jax.train import train_and_evaluate
from poolformers_jax.trainer import checkpoint as checkpoint_lib, faults, step as step_lib
from poolformers_jax.trainer.metrics import read_metrics
from poolformers_jax.trainer.setup import make_setup

ROOMY = 64 * 2**20


@contextlib.contextmanager
def small_filesystem(path, size: int):
  """A tmpfs of `size` bytes mounted at `path` (root: CI runs as root); yields `resize(bytes)`.
  Where mounting is not permitted the test is skipped saying so, except under CI (CI=true),
  where it fails."""
  os.makedirs(path, exist_ok=True)
  mount = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(path)],
                         capture_output=True, text=True, timeout=60)
  if mount.returncode:
    reason = (f'mounting a tmpfs is not permitted here ({mount.stderr.strip()}): the full-disk '
              'tests need root, as CI has')
    if os.environ.get('CI') == 'true':
      pytest.fail(reason)
    pytest.skip(reason)

  def resize(new_size: int) -> None:
    subprocess.run(['mount', '-o', f'remount,size={new_size}', str(path)], check=True,
                   timeout=60)

  try:
    yield resize
  finally:
    subprocess.run(['umount', str(path)], timeout=60)


def _allocated(path) -> int:
  """Bytes the files under `path` hold on their filesystem (whole pages)."""
  return sum(os.lstat(os.path.join(root, name)).st_blocks * 512
             for root, _, names in os.walk(path) for name in names)


def _fill(path, leave: int = 0) -> str:
  """Fills the filesystem of `path` with a ballast file until `leave` bytes are free."""
  ballast = os.path.join(path, 'ballast')
  stats = os.statvfs(path)
  with open(ballast, 'wb') as f:
    f.truncate(0)
    f.write(b'\0' * (stats.f_bavail * stats.f_frsize - leave))
  return ballast


def _leftovers(workdir):
  """Names under the run directory that a finished save would not leave (orbax's temporary
  folders, half-written files)."""
  return sorted(os.path.relpath(os.path.join(root, name), workdir)
                for root, dirs, files in os.walk(workdir) for name in dirs + files
                if 'tmp' in name.split('.')[-1] or name.endswith('.tmp'))


def _tensorboard_steps(workdir, tag='train/loss'):
  """The steps of `tag`'s scalars in each event file of DIR/tensorboard, oldest file first
  (TFRecord framing: length, its CRC, an Event, its CRC)."""
  from tensorboardX.proto import event_pb2
  files = []
  for name in sorted(os.listdir(os.path.join(workdir, 'tensorboard'))):
    with open(os.path.join(workdir, 'tensorboard', name), 'rb') as f:
      data = f.read()
    steps, at = [], 0
    while at + 12 <= len(data):
      (length,) = struct.unpack('<Q', data[at:at + 8])
      event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
      steps += [event.step for value in event.summary.value if value.tag == tag]
      at += 12 + length + 4
    files.append(steps)
  return files


def _params(state):
  return jax.tree.map(np.asarray, jax.device_get(state.params))


def test_full_disk_during_a_checkpoint_keeps_the_last_one_and_resumes_exactly(data_dir,
                                                                               tmp_path):
  """The filesystem takes the checkpoint of step 2, not those of step 4: one line naming the
  save, the free space, checkpoint 2 and the same command; no partial step-4 folder; once
  space is freed the same call resumes from step 2 and ends bit for bit where an
  uninterrupted run ends."""
  config = tiny_config(data_dir, num_train_steps=4, eval_every_steps=0, checkpoint_every_steps=2,
                       final_test=False)
  mount = tmp_path / 'disk'
  with small_filesystem(mount, ROOMY) as resize:
    reference = train_and_evaluate(config, str(mount / 'reference'))
    # Sized on this filesystem's own accounting: the run up to step 2 holds everything but the
    # two step-4 saves (latest, best) of about one checkpoint each; half of one more does not fit.
    total, one = _allocated(mount / 'reference'), _allocated(mount / 'reference/checkpoints/2')
    expected = {'params': _params(reference.state),
                'losses': [r['loss'] for r in read_metrics(str(mount / 'reference'), 'train')]}
    subprocess.run(['rm', '-r', str(mount / 'reference')], check=True, timeout=60)
    # The filesystem's accounting of orbax's temporary files varies from run to run: where even
    # step 2's checkpoint did not fit, the same run is tried again with a little more room.
    for attempt, room in enumerate((total - one - one // 2, total - one, total - one // 2)):
      resize(room)
      workdir = str(mount / f'run{attempt}')
      with pytest.raises(errors.DiskFull) as fault:
        train_and_evaluate(config, workdir)
      if 'checkpoint of step 2 (' not in fault.value.what:
        break
      subprocess.run(['rm', '-r', workdir], check=True, timeout=60)
    line = str(fault.value)
    assert '\n' not in line
    assert fault.value.what.startswith('the ') and 'checkpoint of step 4 (' in fault.value.what
    assert line.startswith(f'disk full: could not write {fault.value.what}; the filesystem of '
                           f'{workdir} has '), line
    assert line.endswith(f'; checkpoint 2 is intact ({workdir}/checkpoints/2, '
                         f'{line.split(f"{workdir}/checkpoints/2, ")[1].split(")")[0]}): the '
                         'same command resumes from step 2 once space is freed'), line
    assert ' KiB free of ' in line
    # No partial step 4 where a resume reads: a step folder is finished or gone. (orbax's writer
    # thread may create its temporary folder after the failed save was cleaned up; a resume
    # never reads those.)
    steps = lambda name: sorted(n for n in os.listdir(os.path.join(workdir, name)) if n.isdigit())
    assert steps('checkpoints') == ['2'] and steps('best') in ([], ['4'])   # best/4 may finish
    assert [r['step'] for r in read_metrics(workdir, 'train')] == [1, 2, 3, 4]

    resize(ROOMY)                                        # space freed: the same call resumes
    resumed = train_and_evaluate(config, workdir)
    assert resumed.step == 4 and resumed.status == 'finished'
    jax.tree.map(np.testing.assert_array_equal, _params(resumed.state), expected['params'])
    assert [r['loss'] for r in read_metrics(workdir, 'train')] == expected['losses']
    # Every TensorBoard record was written, by the run that failed too; the resume's file
    # starts at step 3 (its purge_step hides the first file's steps 3 and 4).
    assert _tensorboard_steps(workdir) == [[1, 2, 3, 4], [3, 4]]


def _commands(commands, env=None):
  """Runs argvs as a user runs them (tests/commands.py: one forked process each)."""
  proc = subprocess.run([sys.executable, os.path.join(REPO, 'tests', 'commands.py'), 'run'],
                        input=json.dumps(commands), capture_output=True, text=True, cwd=REPO,
                        timeout=900, env={**os.environ, 'JAX_PLATFORMS': 'cpu', **(env or {})})
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout)


def test_full_disk_during_metrics_and_eval_writes_ends_in_one_line_and_eval_still_prints(
    data_dir, tmp_path):
  """A finished run on a filesystem filled to the last byte: eval.py prints its metrics, then
  one line that its result file could not be written (exit code 3, no half file); train.py
  resuming it for two more steps stops at its first metrics or TensorBoard write, naming it and
  checkpoint 4, with metrics.jsonl whole; with the ballast gone the same command finishes."""
  overrides = tiny_overrides(data_dir, num_train_steps=4, eval_every_steps=0,
                             checkpoint_every_steps=2, final_test=False)
  train = ['train.py', '--config', 'configs/lra_listops.py:transformer,tiny',
           *[f'--config.{k}={v}' for k, v in overrides.items()]]
  mount = tmp_path / 'disk'
  with small_filesystem(mount, ROOMY):
    workdir = str(mount / 'run')
    train_and_evaluate(tiny_config(data_dir, **overrides), workdir)
    ballast = _fill(mount)
    (evaluated,) = _commands([['eval.py', '--workdir', workdir, '--checkpoint', 'latest',
                               '--split', 'validation']])
    os.truncate(ballast, os.path.getsize(ballast) - 4096)   # a page for the run lock
    (trained,) = _commands([[*train, '--workdir', workdir, '--config.num_train_steps=6']])
    assert evaluated['code'] == trained['code'] == errors.MACHINE_FAULT_EXIT, (evaluated, trained)
    (printed,) = evaluated['stdout'].splitlines()           # computed, not saved: printed
    assert json.loads(printed)['count'] == 20 and json.loads(printed)['step'] == 4
    last = evaluated['stderr'].splitlines()[-1]
    assert last.startswith(f'error: disk full: could not write {workdir}/eval/validation.json; '
                           f'the filesystem of {workdir} has 0 bytes free of '), last
    assert last.endswith('the metrics were computed (eval.py prints them above this line); free '
                         'space and run the same command again to save them'), last
    assert not os.path.exists(os.path.join(workdir, 'eval', 'validation.json'))
    last = trained['stderr'].splitlines()[-1]
    assert last.startswith('error: disk full: could not write '), last
    what = last.split('could not write ')[1].split(';')[0]
    assert what in (f'{workdir}/metrics.jsonl', f'the TensorBoard events in {workdir}/tensorboard')
    assert last.endswith(f'checkpoint 4 is intact ({workdir}/checkpoints/4, '
                         f'{last.split(f"{workdir}/checkpoints/4, ")[1].split(")")[0]}): the '
                         'same command resumes from step 4 once space is freed'), last
    assert not _leftovers(workdir)
    assert [r['step'] for r in read_metrics(workdir, 'train')][:4] == [1, 2, 3, 4]   # whole lines

    os.remove(ballast)
    (finished,) = _commands([[*train, '--workdir', workdir, '--config.num_train_steps=6']])
    assert finished['code'] == 0, finished['stderr'][-3000:]
    assert [r['step'] for r in read_metrics(workdir, 'train')] == [1, 2, 3, 4, 5, 6]


def test_a_step_larger_than_the_memory_is_refused_before_it_runs(data_dir, tmp_path,
                                                                 monkeypatch):
  """The decision on the tiny step's real compiled sizes: refused one byte below what it needs
  (one line with the size, the memory available and the flags that shrink it), run at exactly
  what it needs; the trainer asks it before the first step and writes no checkpoint."""
  config = tiny_config(data_dir)
  setup = make_setup(config)
  memory = step_lib.compile_train_step(setup).memory
  per_device = memory['temp'] + memory['output'] - memory['alias']
  assert per_device > 0
  needed = per_device * 8                   # the 8 CPU devices share the host's memory
  fits = faults.step_memory_error(memory, setup, available=needed, where='host memory',
                                  devices=8)
  assert fits is None
  error = faults.step_memory_error(memory, setup, available=needed - 1,
                                   where='host memory', devices=8)
  assert isinstance(error, errors.MachineFault)
  assert str(error) == (
      f'the compiled train step needs {errors.size_text(needed)} of host memory beyond its '
      f'state ({errors.size_text(per_device)} per device x 8 devices) and '
      f'{errors.size_text(needed - 1)} is available: the process would be killed; shrink the '
      'step with --config.batch_size (now 8), --config.optimizer.grad_accum_steps '
      '(micro-batches, now 1), --config.mesh.fsdp (parameters and optimizer state split, now '
      '1) or --config.mesh.sequence (tokens split, now 1)')
  assert faults.available_memory()[0] > needed   # this machine runs the tiny step

  monkeypatch.setattr(faults, 'available_memory', lambda: (needed - 1, 'host memory'))
  workdir = str(tmp_path / 'run')
  with pytest.raises(faults.OutOfMemory, match='^the compiled train step needs '):
    train_and_evaluate(config, workdir)
  assert not read_metrics(workdir) and not checkpoint_lib.holds_checkpoints(workdir)


def test_a_machine_fault_is_one_line_with_exit_code_3(capsys, tmp_path):
  def full(argv):
    raise ValueError(f"RESOURCE_EXHAUSTED: Error writing local file {tmp_path}/x: "
                     "No space left on device [os_error_code='28']")
  with pytest.raises(SystemExit) as exit_:
    errors.one_line_errors(full)([])
  assert exit_.value.code == 3
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith('error: disk full: could not write a file; the filesystem of ')


def test_bad_records_skipped_on_request_are_counted_in_the_train_metrics(data_dir, tmp_path,
                                                                         caplog):
  """A ListOps TSV run over a train file with two bad rows and a validation file cut mid-line,
  with config.data.skip_bad_records: it trains, and its train metrics and final
  log line count the three skipped lines (this process's count: the files are new)."""
  from poolformers_jax.data import bad_records
  from poolformers_jax.data.generators import listops as generator
  tsv_dir = tmp_path / 'tsv'
  generator.write_tsv(str(tsv_dir), seed=5, sizes={'train': 24, 'validation': 8, 'test': 8},
                      min_tokens=5, max_tokens=30)
  for name, keep in (('basic_train.tsv', lambda i, line: line if i not in (3, 9) else 'x\n'),
                     ('basic_val.tsv', lambda i, line: line if i < 8 else line[:5])):
    lines = (tsv_dir / name).read_text().splitlines(keepends=True)
    (tsv_dir / name).write_text(''.join(keep(i, line) for i, line in enumerate(lines)))
  before = sum(bad_records.skipped().values())
  config = tiny_config(data_dir, num_train_steps=2, eval_every_steps=0, final_test=False,
                       **{'data.source': 'tsv', 'data.tsv_dir': str(tsv_dir),
                          'data.skip_bad_records': True})
  with caplog.at_level('WARNING'):
    result = train_and_evaluate(config, str(tmp_path / 'run'))
  assert result.step == 2
  assert [r['skipped_records'] for r in read_metrics(str(tmp_path / 'run'), 'train')] == [
      before + 3] * 2
  assert (f'{tsv_dir}/basic_train.tsv: 2' in caplog.text
          and f'{tsv_dir}/basic_val.tsv: 1' in caplog.text)
  assert f'skipped {before + 3} bad records (config.data.skip_bad_records)' in caplog.text
