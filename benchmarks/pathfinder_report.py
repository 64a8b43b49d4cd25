"""Statistics of the Pathfinder generator's images, and the sample grid of docs/data.md: what
docs/results/pathfinder_generator.md reports (data/generators/pathfinder.py makes the images).

    python benchmarks/pathfinder_report.py --num_examples 2000 --resolution 32
    python benchmarks/pathfinder_report.py --no_balance     # the official design alone
    python benchmarks/pathfinder_report.py --grid docs/pathfinder_samples.png

The statistics: label balance, lit and ink pixels, contours and paddles drawn against the
official parameters, the markers' distance per label, and the held-out accuracy of two
distance-only classifiers (a threshold, 20 bins), which should sit at chance.
"""
from __future__ import annotations

import math

import numpy as np

from poolformers_jax import errors
from poolformers_jax.data import generators, lra
from poolformers_jax.data.generators import pathfinder


def _stats_batch(args):
  seed, style, batch, count, balance = args
  out = []
  for sample in pathfinder.batch_samples(seed, style, batch, count, balance):
    (ya, xa), (yb, xb) = sample.markers
    ids = pathfinder.ink_components(sample.image, 2 * sample.margin)
    out.append((sample.label, math.hypot(ya - yb, xa - xb), float(np.mean(sample.image > 0)),
                float(np.mean(sample.image >= pathfinder.INK)), len(np.unique(ids)) - 1,
                sample.contours))
  return out


def _distance_classifiers(distance: np.ndarray, label: np.ndarray) -> dict:
  """Held-out accuracy (fit on the first half, scored on the second) of two distance-only
  classifiers: the best threshold, and the majority label in each of 20 equal-count bins."""
  n = len(label) // 2
  fit_d, fit_y, test_d, test_y = distance[:n], label[:n], distance[n:], label[n:]
  best = (0.0, 0.0, 1)
  for t in np.unique(fit_d):
    for sign in (1, -1):
      acc = np.mean((sign * (fit_d - t) <= 0) == fit_y)
      best = max(best, (acc, t, sign))
  _, t, sign = best
  threshold = float(np.mean((sign * (test_d - t) <= 0) == test_y))
  edges = np.quantile(fit_d, np.linspace(0, 1, 21)[1:-1])
  fit_bin, test_bin = np.searchsorted(edges, fit_d), np.searchsorted(edges, test_d)
  vote = np.array([np.mean(fit_y[fit_bin == b]) >= 0.5 if np.any(fit_bin == b) else 1
                   for b in range(20)])
  bins = float(np.mean(vote[test_bin] == test_y))
  return {'threshold': threshold, 'bins': bins}


def report(num_examples: int = 2000, seed: int = 12345, resolution: int = 32,
           difficulty: str = 'curv_baseline', workers: int | None = None,
           balance: bool = True, images_per_file: int = 1000) -> str:
  """Statistics of `num_examples` images, made as `generate` makes them but not written, as
  text. `balance=False`: without the distance balancing (the official design alone)."""
  style = pathfinder.Style.lra(resolution, difficulty)
  tasks = [(seed, style, b, min(images_per_file, num_examples - start), balance)
           for b, start in enumerate(range(0, num_examples, images_per_file))]
  parts = generators.parallel_map(_stats_batch, tasks, workers)
  rows = np.asarray([row for part in parts for row in part])
  label, distance, lit, ink, components, contours = rows.T
  label = label.astype(int)
  acc = _distance_classifiers(distance, label)
  nominal_contours = 2 + style.num_distractors
  nominal_paddles = 2 * style.contour_length + style.num_distractors * style.distractor_length
  paddles = 2 * style.contour_length + (contours - 2) * style.distractor_length
  lines = [
      f'Pathfinder-{resolution} {difficulty}, {len(label)} images (seed {seed}), generator '
      f'v{pathfinder.VERSION}, distance balancing {"on" if balance else "off"}',
      f'  label balance: {label.mean():.3f} positive',
      f'  lit pixels: {lit.mean():.1%} > 0, {ink.mean():.1%} >= {pathfinder.INK} (ink)',
      f'  contours drawn: {contours.mean():.2f} per image (min {contours.min():.0f}, max '
      f'{contours.max():.0f}; official parameters: 2 targets + {style.num_distractors} distractors '
      f'= {nominal_contours}); ink components {components.mean():.2f}',
      f'  paddles: {paddles.mean():.1f} per image (official parameters: {nominal_paddles})',
      f'  marker distance, label 1: mean {distance[label == 1].mean():.2f} px, max '
      f'{distance[label == 1].max():.1f}; label 0: mean {distance[label == 0].mean():.2f}, max '
      f'{distance[label == 0].max():.1f}',
      f'  distance-only classifier, held-out half: threshold {acc["threshold"]:.1%}, '
      f'20 bins {acc["bins"]:.1%} (chance 50 %)',
      '  histogram of the marker distance (px): label 1 | label 0']
  edges = np.linspace(0, math.ceil(distance.max() / 2) * 2, 13)
  h1, _ = np.histogram(distance[label == 1], edges)
  h0, _ = np.histogram(distance[label == 0], edges)
  for lo, hi, a, b in zip(edges[:-1], edges[1:], h1, h0):
    lines.append(f'    {lo:5.1f}-{hi:5.1f}: {a:5d} | {b:5d}')
  return '\n'.join(lines)


def sample_grid(path: str, *, seed: int = 0, resolution: int = 32, per_row: int = 6,
                scale: int = 3) -> None:
  """A PNG grid for docs/data.md: one row per difficulty, positives left, negatives right."""
  from PIL import Image
  rows = []
  for difficulty in lra.PATHFINDER_DIFFICULTIES:
    style = pathfinder.Style.lra(resolution, difficulty)
    rng = pathfinder.batch_rng(seed, style, 0)
    images = [pathfinder.render(rng, style, int(i < per_row // 2)).image for i in range(per_row)]
    pad = np.full((resolution, 2), 90, np.uint8)
    rows.append(np.concatenate([x for image in images for x in (image, pad)][:-1], axis=1))
  gap = np.full((2, rows[0].shape[1]), 90, np.uint8)
  grid = np.concatenate([x for row in rows for x in (row, gap)][:-1], axis=0)
  grid = np.kron(grid, np.ones((scale, scale), np.uint8))
  Image.fromarray(grid).save(path, optimize=True)


@errors.one_line_errors
def main(argv=None) -> None:
  parser = errors.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--seed', type=int, default=None, help='default: 12345 (--grid: 0)')
  parser.add_argument('--resolution', type=int, default=32,
                      choices=sorted(pathfinder.LRA_SETTINGS))
  parser.add_argument('--difficulty', default='curv_baseline',
                      choices=sorted(lra.PATHFINDER_DIFFICULTIES))
  parser.add_argument('--num_examples', type=int, default=2000)
  parser.add_argument('--images_per_file', type=int, default=1000)
  parser.add_argument('--workers', type=int, default=None, help='default: all cores')
  parser.add_argument('--no_balance', action='store_true',
                      help='without the distance balancing (the official design alone)')
  parser.add_argument('--grid', default=None, help='write the sample grid PNG here instead')
  args = parser.parse_args(argv)
  if args.grid:
    sample_grid(args.grid, seed=args.seed or 0, resolution=args.resolution)
    return
  print(report(args.num_examples, 12345 if args.seed is None else args.seed, args.resolution,
               args.difficulty, args.workers, not args.no_balance, args.images_per_file))


if __name__ == '__main__':
  main()
