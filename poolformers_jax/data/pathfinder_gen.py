r"""Pathfinder, made offline: seeded images in the LRA release layout.

After Linsley et al. (2018), "Learning long-range spatial dependencies with horizontal gated
recurrent units", as the Long Range Arena uses it: every image holds two marker discs and
contours made of short dashes ("paddles") whose direction turns by at most `max_turn` from one
dash to the next (bounded curvature). Two main contours have `contour_length` dashes; positive
(label 1): both discs sit at the two ends of the same main contour; negative (label 0): one disc
at one end of each main contour. Shorter distractor contours fill the rest. Difficulty is the
contour length: 6 / 9 / 14 dashes for LRA's curv_baseline / curv_contour_length_9 /
curv_contour_length_14; 32x32 is Pathfinder, 128x128 Path-X.

The label is visible in the pixels alone: ink pixels (value > 0) at Chebyshev distance <= LINK
= 2 (across a dash gap of one or two pixels) belong together, and the generator
keeps every two contours more than LINK apart. So a flood fill over ink pixels linked within
distance 2 joins the two discs exactly when the label is 1 (tests/data/test_pathfinder_gen.py).

Output (what `config.data.format='lra_release'` reads):
  {out_dir}/pathfinder{R}/{difficulty}/imgs/{b}/sample_{k}.png      (8-bit grayscale)
  {out_dir}/pathfinder{R}/{difficulty}/metadata/{b}.npy            (text, one line per image:
      `imgs/{b} sample_{k}.png {k} {label} {max_turn_deg} {contour_length} {distractor_length}
      {dash_length} 1 {gap} 1`, the release's columns)
Each batch b of `images_per_file` images is made from its own seeded stream, so the files are
byte-identical for a seed whatever the number of processes; labels are balanced in every batch.

  python -m poolformers_jax.data.pathfinder_gen --out_dir data_cache/pathfinder_gen \
      --resolution 32 --difficulty curv_baseline --num_examples 200000
"""
from __future__ import annotations

import dataclasses
import io
import math
import os
import random
import shutil
from typing import Optional

import numpy as np

DIFFICULTIES = {'curv_baseline': 6, 'curv_contour_length_9': 9, 'curv_contour_length_14': 14}
LINK = 2            # Chebyshev distance within which ink pixels count as one stroke
_NEIGHBOURS = [(dy, dx) for dy in range(-LINK, LINK + 1) for dx in range(-LINK, LINK + 1)]


@dataclasses.dataclass(frozen=True)
class Style:
  """Geometry in pixels at resolution R (32 = Pathfinder, 128 = Path-X: lengths scale by R/32)."""
  resolution: int = 32
  contour_length: int = 6
  max_turn_deg: float = 30.0   # bounded curvature: turn between consecutive dashes
  num_distractors: int = 0     # 0 = by resolution and length (see `distractors`)
  distractor_length: int = 0   # 0 = contour_length // 2
  gap: float = 1.6             # between dashes; fixed in pixels so that LINK always bridges it

  @property
  def scale(self) -> float:
    return self.resolution / 32

  @property
  def dash(self) -> float:
    return 1.5 * self.scale

  @property
  def disc_radius(self) -> float:
    return 1.5 * self.scale

  @property
  def distractors(self) -> int:
    if self.num_distractors:
      return self.num_distractors
    return max(1, round(2 * self.scale * 6 / self.contour_length))

  @property
  def distractor_dashes(self) -> int:
    return self.distractor_length or max(self.contour_length // 2, 2)


class _Canvas:
  """Ink pixels: (y, x) -> (contour, dash index), and their grey values."""

  def __init__(self, resolution: int, ink=None, values=None):
    self.resolution = resolution
    self.ink = dict(ink or {})
    self.values = dict(values or {})

  def copy(self) -> '_Canvas':
    return _Canvas(self.resolution, self.ink, self.values)

  def allowed(self, pixels, owner: int, dash: int) -> bool:
    """In the image, and more than LINK away from other contours and from own dashes < dash-1."""
    r, ink = self.resolution, self.ink
    for y, x in pixels:
      if not (0 <= y < r and 0 <= x < r):
        return False
      for dy, dx in _NEIGHBOURS:
        hit = ink.get((y + dy, x + dx))
        if hit is not None and (hit[0] != owner or hit[1] < dash - 1):
          return False
    return True

  def draw(self, pixels, owner: int, dash: int, value: int) -> None:
    for pixel in pixels:   # discs (255) stay on top; a pixel keeps its first dash index
      self.ink.setdefault(pixel, (owner, dash))
      self.values[pixel] = max(self.values.get(pixel, 0), value)

  def image(self) -> np.ndarray:
    out = np.zeros((self.resolution, self.resolution), np.uint8)
    for (y, x), value in self.values.items():
      out[y, x] = value
    return out


def _segment_pixels(start, angle: float, length: float):
  """Pixels of a 1-pixel-wide dash: points every 1/4 px along it, rounded half up."""
  n = int(math.ceil(length * 4))
  dy, dx = math.sin(angle) * length / n, math.cos(angle) * length / n
  return list(dict.fromkeys((math.floor(start[0] + i * dy + 0.5), math.floor(start[1] + i * dx + 0.5))
                            for i in range(n + 1)))


def _disc_pixels(center, radius: float):
  cy, cx = (math.floor(c + 0.5) for c in center)
  k = int(math.ceil(radius))
  return [(cy + dy, cx + dx) for dy in range(-k, k + 1) for dx in range(-k, k + 1)
          if dy * dy + dx * dx <= radius * radius + 1e-9]


def _clear_of_border(pixels, resolution: int) -> bool:
  """Discs keep a 1-pixel border free, the start disc and the end disc alike (else a disc on the
  border would give the label away)."""
  return all(1 <= y < resolution - 1 and 1 <= x < resolution - 1 for y, x in pixels)


def _linked(a, b) -> bool:
  return any(max(abs(y1 - y2), abs(x1 - x2)) <= LINK for y1, x1 in a for y2, x2 in b)


def _contour(canvas: _Canvas, rng: random.Random, style: Style, owner: int, dashes: int,
             discs: tuple[bool, bool], tries: int = 30, budget_per_dash: int = 30) -> bool:
  """Draws one contour (discs at its start / end as asked) into `canvas`; False if no room.

  Grown dash by dash, each turning by a uniform angle in [-max_turn, max_turn]; a dash that
  finds no room in 4 turns takes back the previous one (backtracking), within a budget.
  """
  max_turn = math.radians(style.max_turn_deg)
  r = style.resolution
  margin = style.disc_radius + 1
  value = 160 + int(rng.random() * 96)               # grey level of this contour, 160..255
  for _ in range(tries):
    start = (rng.uniform(margin, r - margin), rng.uniform(margin, r - margin))
    # Head roughly towards the centre (within 90 degrees) so that long contours fit.
    heading = math.atan2(r / 2 - start[0], r / 2 - start[1]) + rng.uniform(-math.pi / 2, math.pi / 2)
    base = []                                        # strokes: (pixels, dash index, value)
    if discs[0]:
      disc = _disc_pixels(start, style.disc_radius)
      if not (_clear_of_border(disc, r) and canvas.allowed(disc, owner, 0)):
        continue
      base.append((disc, 0, 255))
    path = [(start, heading)]                          # (next dash start, heading) per dash
    placed, failures, budget = [], [0] * (dashes + 1), budget_per_dash * dashes
    current = canvas.copy()
    for stroke in base:
      current.draw(stroke[0], owner, stroke[1], stroke[2])
    end_disc = None
    while len(placed) < dashes and budget > 0:
      budget -= 1
      i = len(placed)
      position, heading = path[-1]
      angle = heading + rng.uniform(-max_turn, max_turn)
      pixels = _segment_pixels(position, angle, style.dash)
      ok = current.allowed(pixels, owner, i) and (not placed or _linked(pixels, placed[-1][0]))
      sin, cos = math.sin(angle), math.cos(angle)
      end = (position[0] + style.dash * sin, position[1] + style.dash * cos)
      if ok and i == dashes - 1 and discs[1]:
        end_disc = _disc_pixels(end, style.disc_radius)
        ok = _clear_of_border(end_disc, r) and current.allowed(end_disc, owner, i)
      if ok:
        placed.append((pixels, i, value))
        current.draw(pixels, owner, i, value)
        path.append(((end[0] + style.gap * sin, end[1] + style.gap * cos), angle))
        failures[i + 1] = 0
        continue
      failures[i] += 1
      if failures[i] >= 4 and placed:                  # take back the previous dash
        placed.pop()
        path.pop()
        failures[i] = 0
        current = canvas.copy()
        for stroke in base + placed:
          current.draw(stroke[0], owner, stroke[1], stroke[2])
    if len(placed) == dashes:
      if discs[1]:
        placed.append((end_disc, dashes - 1, 255))
      for pixels, index, v in base + placed:
        canvas.draw(pixels, owner, index, v)
      return True
  return False


def render(rng: random.Random, style: Style, label: int) -> np.ndarray:
  """One [R, R] uint8 image of class `label` (1 = the discs are on one contour)."""
  main = [(True, True), (False, False)] if label else [(True, False), (True, False)]
  plan = [(style.contour_length, d) for d in main]
  plan += [(style.distractor_dashes, (False, False))] * style.distractors
  while True:
    canvas = _Canvas(style.resolution)
    if all(_contour(canvas, rng, style, owner, n, discs) for owner, (n, discs) in enumerate(plan)):
      return canvas.image()


def _batch_rng(seed: int, style: Style, batch: int) -> random.Random:
  # A str seed is hashed with SHA-512: the same stream on every platform and Python version.
  return random.Random(f'pathfinder/{seed}/{style.resolution}/{style.contour_length}/{batch}')


def _png(image: np.ndarray) -> bytes:
  from PIL import Image
  out = io.BytesIO()
  Image.fromarray(image).save(out, format='PNG')
  return out.getvalue()


def write_batch(args) -> int:
  """Writes imgs/{batch}/sample_*.png and metadata/{batch}.npy under `folder`; returns the count."""
  folder, seed, style, batch, count = args
  rng = _batch_rng(seed, style, batch)
  labels = [k % 2 for k in range(count)]       # balanced: count // 2 of each (+1 if odd)
  rng.shuffle(labels)
  image_dir = os.path.join(folder, 'imgs', str(batch))
  os.makedirs(image_dir, exist_ok=True)
  lines = []
  for k, label in enumerate(labels):
    image = render(rng, style, label)
    with open(os.path.join(image_dir, f'sample_{k}.png'), 'wb') as f:
      f.write(_png(image))
    lines.append(f'imgs/{batch} sample_{k}.png {k} {label} {style.max_turn_deg:g} '
                 f'{style.contour_length} {style.distractor_dashes} {style.dash:g} 1 {style.gap:g} 1\n')
  os.makedirs(os.path.join(folder, 'metadata'), exist_ok=True)
  with open(os.path.join(folder, 'metadata', f'{batch}.npy'), 'w') as f:
    f.write(''.join(lines))
  return count


def generate(out_dir: str, *, seed: int = 0, resolution: int = 32,
             difficulty: str = 'curv_baseline', num_examples: int = 200000,
             images_per_file: int = 1000, workers: Optional[int] = None) -> str:
  """Writes {out_dir}/pathfinder{R}/{difficulty}/ unless complete; returns that folder.

  Written into a temporary folder and renamed at the end, so a folder that exists is complete.
  """
  if difficulty not in DIFFICULTIES:
    raise ValueError(f'difficulty={difficulty!r}; choose one of {sorted(DIFFICULTIES)}.')
  if resolution < 16:
    raise ValueError(f'resolution={resolution}: Pathfinder needs at least 16 pixels (32 or 128).')
  folder = os.path.join(out_dir, f'pathfinder{resolution}', difficulty)
  if os.path.isdir(folder):
    return folder
  style = Style(resolution=resolution, contour_length=DIFFICULTIES[difficulty])
  tmp = f'{folder}.tmp{os.getpid()}'
  counts = [min(images_per_file, num_examples - start) for start in range(0, num_examples,
                                                                          images_per_file)]
  tasks = [(tmp, seed, style, b, n) for b, n in enumerate(counts)]
  if workers is None:
    workers = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  if workers > 1 and len(tasks) > 1:
    import multiprocessing
    with multiprocessing.get_context('spawn').Pool(min(workers, len(tasks))) as pool:
      pool.map(write_batch, tasks, chunksize=1)
  else:
    for task in tasks:
      write_batch(task)
  try:
    os.rename(tmp, folder)
  except OSError:   # another process finished the same (seeded, identical) folder first
    if not os.path.isdir(folder):
      raise
    shutil.rmtree(tmp, ignore_errors=True)
  return folder


def sample_grid(path: str, *, seed: int = 0, resolution: int = 32, per_row: int = 6,
                scale: int = 3) -> None:
  """A PNG grid for docs/data.md: one row per difficulty, positives left, negatives right."""
  from PIL import Image
  rows = []
  for difficulty, length in DIFFICULTIES.items():
    style = Style(resolution=resolution, contour_length=length)
    rng = _batch_rng(seed, style, 0)
    images = [render(rng, style, int(i < per_row // 2)) for i in range(per_row)]
    pad = np.full((resolution, 2), 90, np.uint8)
    rows.append(np.concatenate([x for image in images for x in (image, pad)][:-1], axis=1))
  gap = np.full((2, rows[0].shape[1]), 90, np.uint8)
  grid = np.concatenate([x for row in rows for x in (row, gap)][:-1], axis=0)
  grid = np.kron(grid, np.ones((scale, scale), np.uint8))
  Image.fromarray(grid).save(path, optimize=True)


def main(argv=None) -> None:
  import argparse
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--out_dir', required=True)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--resolution', type=int, default=32)
  parser.add_argument('--difficulty', default='curv_baseline', choices=sorted(DIFFICULTIES))
  parser.add_argument('--num_examples', type=int, default=200000)
  parser.add_argument('--images_per_file', type=int, default=1000)
  parser.add_argument('--workers', type=int, default=None, help='default: all cores')
  parser.add_argument('--grid', default=None, help='write a sample grid PNG here and exit')
  args = parser.parse_args(argv)
  if args.grid:
    sample_grid(args.grid, seed=args.seed, resolution=args.resolution)
    return
  folder = generate(args.out_dir, seed=args.seed, resolution=args.resolution,
                    difficulty=args.difficulty, num_examples=args.num_examples,
                    images_per_file=args.images_per_file, workers=args.workers)
  print(f'{args.num_examples} images in {folder}')


if __name__ == '__main__':
  main()
