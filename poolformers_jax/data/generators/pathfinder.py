r"""Pathfinder, made offline the way the official generator draws it, in the LRA release layout.

After Linsley et al. (2018) / Kim et al. (2020), as the Long Range Arena uses it: are the two
marker discs on one contour? Our own code for the algorithm of the official generator
(`drewlinsley/pathfinder`, snakes2.py): two target contours of paddles grown alternately from
seeds `seed_distance` apart, continuity-weighted turns, the origin marker on one target's first
tail, the terminal marker on the same target's last head (label 1) or the other's (label 0),
distractor contours of a third of the length, everything drawn at `antialias` times the size and
Lanczos-resampled, at the parameters LRA's builders state per resolution (`LRA_SETTINGS`).

Where we differ, for a label that is exact in the pixels: a pixel >= INK (of 255) is ink, ink
pixels within Chebyshev distance 2 margin are linked, and ink of different contours stays more
than 2 margin apart, so a flood fill from one marker reaches the other exactly when the label
is 1; the markers are placed before the distractors; and within each file samples are kept by
label and markers' distance so that distance alone predicts nothing (`batch_samples`). Every
fact of the official script, each parameter's source and each departure's measurement:
docs/results/pathfinder_generator.md.

Output (what `config.data.format='lra_release'` reads):
  {out_dir}/pathfinder{R}/{difficulty}/imgs/{b}/sample_{k}.png      (8-bit grayscale)
  {out_dir}/pathfinder{R}/{difficulty}/metadata/{b}.npy            (text, one line per image:
      `imgs/{b} sample_{k}.png {k} {label} {continuity} {contour_length} {distractor_length}
      {paddle_length} {paddle_thickness} {margin} 1`, the release's columns)
Each batch b of `images_per_file` images is made from its own seeded stream, so the files are
byte-identical for a seed whatever the number of processes; labels are balanced in every batch.

  python -m poolformers_jax.data.generators.pathfinder --out_dir data_cache/pathfinder_gen \
      --resolution 32 --difficulty curv_baseline --num_examples 200000
"""
from __future__ import annotations

import collections
import dataclasses
import io
import math
import os
import random
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np

from poolformers_jax import errors
from poolformers_jax.data import generators, lra

VERSION = 2        # of the drawing; names the cache folder of format='generated'
INK = 32           # pixels >= INK are ink; below: background and the Lanczos filter's ringing
PADDLE_TRIES = 8   # directions tried per paddle before the contour gives up
DISTRACTOR_TRIES = 5   # [max_distractor_contour_retrial = 4] + 1

# LRA's builder settings (module docstring); other fields keep the Style defaults.
LRA_SETTINGS: dict[int, dict[str, Any]] = {
    32: dict(paddle_length=2, paddle_thickness=0.5, margins=(1,), continuity=1.0,
             marker_radius=1.5, seed_distance=7, padding=1, distractor_paddles=20,
             target_contrast=1.5, distractor_contrast=2.0),
    128: dict(paddle_length=5, paddle_thickness=1.5, margins=(2, 3), continuity=1.8,
              marker_radius=3, seed_distance=20, padding=1, distractor_paddles=35,
              target_contrast=0.9, distractor_contrast=0.9),
}


@dataclasses.dataclass(frozen=True)
class Style:
  """The generator's parameters, lengths in pixels of the output image."""
  resolution: int = 32
  contour_length: int = 6          # paddles per target contour
  paddle_length: float = 2
  paddle_thickness: float = 0.5
  margins: tuple = (1,)            # paddle margin, one drawn per image
  continuity: float = 1.0          # turn weight cos^2(min(continuity * |turn|, 90 deg))
  marker_radius: float = 1.5
  seed_distance: float = 7         # between the two targets' first tails
  padding: int = 1                 # border kept free
  antialias: int = 2               # drawn at this many times the resolution, then resampled
  distractor_paddles: int = 20     # distractors: distractor_paddles // distractor_length contours
  target_contrast: float = 1.5
  distractor_contrast: float = 2.0

  @classmethod
  def lra(cls, resolution: int = 32, difficulty: str = 'curv_baseline') -> Style:
    if resolution not in LRA_SETTINGS:
      raise ValueError(f'resolution={resolution}: LRA states the generator settings of '
                       f'{sorted(LRA_SETTINGS)} (Pathfinder, Path-X); choose one of them.')
    lengths = lra.PATHFINDER_DIFFICULTIES
    if difficulty not in lengths:
      raise ValueError(f'difficulty={difficulty!r}; choose one of {sorted(lengths)}.')
    return cls(resolution=resolution, contour_length=lengths[difficulty],
               **LRA_SETTINGS[resolution])

  @property
  def distractor_length(self) -> int:
    return max(1, self.contour_length // 3)

  @property
  def num_distractors(self) -> int:
    return self.distractor_paddles // self.distractor_length


@dataclasses.dataclass
class Sample:
  image: np.ndarray      # [R, R] uint8
  label: int             # 1: the markers sit on one contour
  markers: tuple         # ((y, x) origin, (y, x) terminal): disc centres, pixel units
  margin: int            # the paddle margin drawn for this image; ink links within 2 margin
  contours: int          # targets + distractors drawn


def _unit(theta: float):
  return math.sin(theta), math.cos(theta)


def _along(point, theta: float, distance: float):
  dy, dx = _unit(theta)
  return point[0] + distance * dy, point[1] + distance * dx


def _stamp(style: Style, points, draw) -> tuple[int, int, np.ndarray]:
  """Coverage in [0, 1] of a shape near `points`, drawn by draw(ImageDraw, to_canvas) at
  `antialias` times the resolution and resampled with Lanczos; returns (y0, x0, crop). The crop
  leaves room for the filter's reach (3 px) and for a link (2 margin) around the ink."""
  from PIL import Image, ImageDraw
  a = style.antialias
  pad = int(math.ceil(style.paddle_thickness + style.marker_radius)) + 3 + 2 * max(style.margins)
  y0 = int(math.floor(min(p[0] for p in points))) - pad
  x0 = int(math.floor(min(p[1] for p in points))) - pad
  h = int(math.ceil(max(p[0] for p in points))) + pad - y0
  w = int(math.ceil(max(p[1] for p in points))) + pad - x0
  big = Image.new('L', (w * a, h * a), 0)
  # PIL puts integer coordinates at pixel centres: point (y, x) is at ((x - x0) a - 0.5, ...).
  draw(ImageDraw.Draw(big), lambda p: ((p[1] - x0) * a - 0.5, (p[0] - y0) * a - 0.5))
  small = big.resize((w, h), Image.Resampling.LANCZOS)   # uint8, clipped, as imresize returns it
  return y0, x0, np.asarray(small, np.float32) / 255


def _paddle(style: Style, tail, head):
  width = int(round(style.paddle_thickness * style.antialias))
  return _stamp(style, (tail, head),
                lambda d, at: d.line([at(tail), at(head)], fill=255, width=width))


def _disc(style: Style, center):
  r = style.marker_radius * style.antialias
  def draw(d, at):
    x, y = at(center)
    d.ellipse([x - r, y - r, x + r, y + r], fill=255)
  return _stamp(style, (center,), draw)


def _dilate(mask: np.ndarray, k: int) -> np.ndarray:
  """Pixels within Chebyshev distance k of a True pixel."""
  window = np.lib.stride_tricks.sliding_window_view
  rows = window(np.pad(mask, k), 2 * k + 1, axis=0).any(-1)
  return np.asarray(window(rows, 2 * k + 1, axis=1).any(-1))


class _Stroke:
  """A stamp's ink and its reach (pixels within 2 margin of the ink), clipped to the image."""

  def __init__(self, canvas: _Canvas, stamp, contrast: float):
    y0, x0, crop = stamp
    r = canvas.style.resolution
    self.value = crop * contrast
    self.image = (slice(max(y0, 0), min(y0 + crop.shape[0], r)),
                  slice(max(x0, 0), min(x0 + crop.shape[1], r)))
    self.crop = tuple(slice(part.start - origin, part.stop - origin)
                      for part, origin in zip(self.image, (y0, x0)))
    self.ink_crop = self.value * 255 >= INK - 0.5          # rounds to >= INK
    self.ink = self.ink_crop[self.crop]

  def reach(self, link: int) -> np.ndarray:
    return _dilate(self.ink_crop, link)[self.crop]


class _Canvas:
  """The image being drawn. Per pixel: the contrast-scaled coverage, the contour owning it if it
  is ink, and `near`: -1 if no ink lies within 2 margin, else the contour whose ink does
  (-2: several); `kept`, the same for the terminal discs the targets may get (while they grow).
  Per contour: the reach of its last paddle (the next one must touch it) and of the others (the
  next one must keep out of it), its end (pivot, direction) and tips."""

  def __init__(self, style: Style, margin: int):
    r = style.resolution
    self.style, self.margin, self.link = style, margin, 2 * margin
    self.value = np.zeros((r, r), np.float32)
    self.owner = np.full((r, r), -1, np.int16)
    self.near = np.full((r, r), -1, np.int16)
    self.kept = np.full((r, r), -1, np.int16)
    # contour -> its last stroke's and earlier strokes' ink, its end (pivot, theta), its two
    # tips, its disc marker
    self.last: dict[int, np.ndarray] = {}
    self.earlier: dict[int, np.ndarray] = {}
    self.ends: dict[int, tuple] = {}
    self.tips: dict[int, tuple] = {}
    self.discs: dict[int, Any] = {}

  def copy(self) -> _Canvas:
    other = object.__new__(_Canvas)
    other.__dict__.update(self.__dict__)
    for name in ('value', 'owner', 'near', 'kept'):
      setattr(other, name, getattr(self, name).copy())
    for name in ('last', 'earlier', 'ends', 'tips', 'discs'):   # values replaced, not changed
      setattr(other, name, dict(getattr(self, name)))
    return other

  def in_bounds(self, *points) -> bool:
    lo = self.style.padding + self.margin
    hi = self.style.resolution - lo
    return all(lo <= c <= hi for point in points for c in point)

  def free(self, point, contour: int) -> bool:
    """The pixel at `point` is within 2 margin of no other contour's ink nor of this contour's
    paddles other than the last."""
    y, x = int(point[0]), int(point[1])
    return (all(near[y, x] in (-1, contour) for near in (self.near, self.kept))
            and not (contour in self.earlier and self.earlier[contour][y, x]))

  def clear(self, stroke: _Stroke, contour: int) -> bool:
    """No ink within 2 margin of another contour's ink (or kept disc)."""
    for near in (self.near, self.kept):
      near = near[stroke.image][stroke.ink]
      if np.any((near != -1) & (near != contour)):
        return False
    return True

  def _mark(self, near: np.ndarray, stroke: _Stroke, contour: int) -> np.ndarray:
    reach = stroke.reach(self.link)
    near = near[stroke.image]
    near[reach & (near != -1) & (near != contour)] = -2
    near[reach & (near == -1)] = contour
    return reach

  def draw(self, stroke: _Stroke, contour: int) -> np.ndarray:
    """Adds the stroke; returns its reach as a full-size mask."""
    part = self.value[stroke.image]
    np.maximum(part, stroke.value[stroke.crop], out=part)
    self.owner[stroke.image][stroke.ink] = contour
    full = np.zeros(self.value.shape, bool)
    full[stroke.image] = self._mark(self.near, stroke, contour)
    return full

  def place(self, contour: int, tail, head, pivot, theta: float, contrast: float,
            disc: bool = False) -> bool:
    """Adds the paddle tail -> head to `contour` if it fits (and, if `disc`, a marker disc on
    its head: kept, not drawn); the contour's end moves on."""
    if not self.in_bounds(tail, head):
      return False
    stroke = _Stroke(self, _paddle(self.style, tail, head), contrast)
    if not stroke.ink.any() or not self.clear(stroke, contour):
      return False
    if disc:
      marker = _Stroke(self, _disc(self.style, head), 1.0)
      if not self.clear(marker, contour):
        return False
    if contour in self.last:     # touch the last paddle, keep out of the earlier ones' reach
      if (not np.any(self.last[contour][stroke.image][stroke.ink])
          or np.any(self.earlier[contour][stroke.image][stroke.ink])):
        return False
      self.earlier[contour] = self.earlier[contour] | self.last[contour]
    else:
      self.earlier[contour] = np.zeros(self.value.shape, bool)
    self.last[contour] = self.draw(stroke, contour)
    self.ends[contour] = (pivot, theta)
    self.tips[contour] = (self.tips.get(contour, (tail,))[0], head)
    if disc:
      self._mark(self.kept, marker, contour)
      self.discs[contour] = marker
    return True

  def seed(self, rng: random.Random, contour: int, tail, contrast: float) -> bool:
    theta = rng.uniform(-math.pi, math.pi)
    head = _along(tail, theta, self.style.paddle_length)
    return self.place(contour, tail, head, _along(tail, theta, -self.margin), theta, contrast)

  def extend(self, rng: random.Random, contour: int, contrast: float, disc: bool = False) -> bool:
    """The official step: candidate heads 1 px of arc apart on the circle of radius
    paddle_length + margin around the next pivot, weighted cos^2(min(continuity |turn|, 90 deg))
    where the head is in bounds and free; up to PADDLE_TRIES draws must fit."""
    s, m = self.style, self.margin
    pivot, theta = self.ends[contour]
    pivot = _along(pivot, theta, s.paddle_length + 2 * m)
    radius = s.paddle_length + m
    limit = math.pi / 2 / s.continuity
    step = 1 / radius
    turns = np.arange(-limit, limit, step) + rng.uniform(0, step)
    turns = turns[np.abs(turns) < limit]
    weights = np.cos(s.continuity * turns) ** 2
    for i, turn in enumerate(turns):
      head = _along(pivot, theta + turn, radius)
      if not (self.in_bounds(head) and self.free(head, contour)):
        weights[i] = 0
    for _ in range(PADDLE_TRIES):
      total = weights.sum()
      if total <= 0:
        return False
      i = int(np.searchsorted(np.cumsum(weights), rng.random() * total, side='right'))
      i = min(i, len(turns) - 1)
      direction = theta + float(turns[i])
      if self.place(contour, _along(pivot, direction, m), _along(pivot, direction, radius),
                    pivot, direction, contrast, disc):
        return True
      weights[i] = 0
    return False

  def image(self) -> np.ndarray:
    """uint8, scaled so that the maximum is 255 (scipy.misc.imsave's bytescale), half up."""
    return np.floor(self.value * (255 / self.value.max()) + 0.5).astype(np.uint8)


def _targets(rng: random.Random, canvas: _Canvas, label: int):
  """Grows the two targets with their markers; returns the marker centres (None: start over).

  The origin marker goes on target `origin`, drawn as soon as its first paddle is: the other
  target grows around it. Each target's last paddle must leave room for a disc on its head, kept
  free while the targets grow; the terminal marker is then drawn on one of them by the label.
  What is checked does not depend on the label."""
  s = canvas.style
  origin = rng.randrange(2)
  lo, hi = 2 * s.seed_distance, s.resolution - 2 * s.seed_distance
  first = (rng.uniform(lo, hi), rng.uniform(lo, hi))
  seeds = (first, _along(first, rng.uniform(-math.pi, math.pi), s.seed_distance))
  for c in (0, 1):
    if not canvas.seed(rng, c, seeds[c], s.target_contrast):
      return None
    if c == origin:
      disc = _Stroke(canvas, _disc(s, seeds[c]), 1.0)
      if not canvas.clear(disc, c):
        return None
      canvas.draw(disc, c)
  for k in range(1, s.contour_length):
    for c in (0, 1):
      if not canvas.extend(rng, c, s.target_contrast, disc=k == s.contour_length - 1):
        return None
  terminal = origin if label else 1 - origin
  canvas.draw(canvas.discs[terminal], terminal)
  canvas.kept[:] = -1            # the other disc is not drawn: distractors may come near
  return canvas.tips[origin][0], canvas.tips[terminal][1]


def _distractors(rng: random.Random, canvas: _Canvas) -> tuple[_Canvas, int]:
  """Each distractor: a tail on a free pixel, up to DISTRACTOR_TRIES times; skipped if none fits."""
  s = canvas.style
  lo = s.padding + canvas.margin
  hi = s.resolution - lo
  drawn = 0
  for i in range(s.num_distractors):
    contour = 2 + i
    for _ in range(DISTRACTOR_TRIES):
      ys, xs = np.nonzero(canvas.near[lo:hi, lo:hi] == -1)
      if not len(ys):
        return canvas, drawn
      k = rng.randrange(len(ys))
      tail = (lo + ys[k] + rng.random(), lo + xs[k] + rng.random())
      trial = canvas.copy()
      if trial.seed(rng, contour, tail, s.distractor_contrast) and all(
          trial.extend(rng, contour, s.distractor_contrast)
          for _ in range(s.distractor_length - 1)):
        canvas, drawn = trial, drawn + 1
        break
  return canvas, drawn


def ink_components(image: np.ndarray, link: int) -> np.ndarray:
  """Component id per pixel (0: not ink) of ink pixels linked within Chebyshev distance `link`:
  link x link boxes anchored at the ink pixels touch (8-connected) exactly then."""
  from scipy import ndimage
  ink = image >= INK
  boxes = ndimage.maximum_filter(ink, size=link, mode='constant')
  labels, _ = ndimage.label(boxes, structure=np.ones((3, 3)))
  return np.where(ink, labels, 0)


def _targets_apart(image: np.ndarray, canvas: _Canvas) -> bool:
  """Each target (with its markers) is one component, and not the other's: a check on the final
  pixels (the scaling to 255 can take a pixel under INK), independent of the label."""
  ids = ink_components(image, canvas.link)
  a = np.unique(ids[(canvas.owner == 0) & (ids > 0)])
  b = np.unique(ids[(canvas.owner == 1) & (ids > 0)])
  return len(a) == 1 and len(b) == 1 and a[0] != b[0]


def render(rng: random.Random, style: Style, label: int) -> Sample:
  """One image of class `label` (1 = the markers are on one contour)."""
  margin = rng.choice(style.margins)
  while True:
    canvas = _Canvas(style, margin)
    markers = _targets(rng, canvas, label)
    if markers is None:
      continue
    canvas, drawn = _distractors(rng, canvas)
    image = canvas.image()
    if _targets_apart(image, canvas):
      return Sample(image, label, markers, margin, 2 + drawn)


def batch_rng(seed: int, style: Style, batch: int) -> random.Random:
  # A str seed is hashed with SHA-512: the same stream on every platform and Python version.
  return random.Random(f'pathfinder/v{VERSION}/{seed}/{style.resolution}/{style.contour_length}/'
                       f'{batch}')


def batch_samples(seed: int, style: Style, batch: int, count: int,
                  balance: bool = True) -> Iterator[Sample]:
  """The samples of file `batch`: count // 2 positives, the rest negatives, shuffled.

  `balance`: the official design alone leaves the markers' distance a clue (the negatives' spans
  one contour plus the seeds' offset: wider, and longer than any positive; measured by
  benchmarks/pathfinder_report.py). So a sample in distance bin b (resolution / 32 px wide) is
  kept with probability min(1, p_other(b) / p_own(b)), p the two labels' frequencies of b among
  the samples drawn so far in the file (the other's with 0.1 added): both labels are then kept
  with one distribution of distances, proportional to min(p_0, p_1). A dropped sample is drawn
  again with its label."""
  rng = batch_rng(seed, style, batch)
  labels = [k % 2 for k in range(count)]
  rng.shuffle(labels)
  drawn: collections.Counter[tuple[int, Any]] = collections.Counter()
  totals = [0, 0]
  for label in labels:
    while True:
      sample = render(rng, style, label)
      (ya, xa), (yb, xb) = sample.markers
      key = int(math.hypot(ya - yb, xa - xb) * 32 / style.resolution)
      drawn[label, key] += 1
      totals[label] += 1
      own = drawn[label, key] / totals[label]
      other = (drawn[1 - label, key] + 0.1) / (totals[1 - label] + 1)
      if not balance or rng.random() * own < other:
        break
    yield sample


def _png(image: np.ndarray) -> bytes:
  from PIL import Image
  out = io.BytesIO()
  Image.fromarray(image).save(out, format='PNG')
  return out.getvalue()


def metadata_line(batch: int, k: int, sample: Sample, style: Style) -> str:
  return (f'imgs/{batch} sample_{k}.png {k} {sample.label} {float(style.continuity)} '
          f'{style.contour_length} {style.distractor_length} {style.paddle_length:g} '
          f'{float(style.paddle_thickness)} {sample.margin} 1\n')


def write_batch(args) -> int:
  """Writes imgs/{batch}/sample_*.png and metadata/{batch}.npy under `folder`; returns the count."""
  folder, seed, style, batch, count = args
  image_dir = os.path.join(folder, 'imgs', str(batch))
  os.makedirs(image_dir, exist_ok=True)
  lines = []
  for k, sample in enumerate(batch_samples(seed, style, batch, count)):
    with open(os.path.join(image_dir, f'sample_{k}.png'), 'wb') as f:
      f.write(_png(sample.image))
    lines.append(metadata_line(batch, k, sample, style))
  os.makedirs(os.path.join(folder, 'metadata'), exist_ok=True)
  with open(os.path.join(folder, 'metadata', f'{batch}.npy'), 'w') as f:
    f.write(''.join(lines))
  return count


def generate(out_dir: str, *, seed: int = 0, resolution: int = 32,
             difficulty: str = 'curv_baseline', num_examples: int = 200000,
             images_per_file: int = 1000, workers: int | None = None) -> str:
  """Writes {out_dir}/pathfinder{R}/{difficulty}/ unless complete; returns that folder.

  Written into a temporary folder and renamed at the end, so a folder that exists is complete.
  """
  style = Style.lra(resolution, difficulty)
  folder = os.path.join(out_dir, f'pathfinder{resolution}', difficulty)
  if os.path.isdir(folder):
    return folder
  tmp = f'{folder}.tmp{os.getpid()}'
  counts = [min(images_per_file, num_examples - start) for start in range(0, num_examples,
                                                                          images_per_file)]
  generators.parallel_map(write_batch, [(tmp, seed, style, b, n) for b, n in enumerate(counts)],
                          workers)
  try:
    os.rename(tmp, folder)
  except OSError:   # another process finished the same (seeded, identical) folder first
    if not os.path.isdir(folder):
      raise
    shutil.rmtree(tmp, ignore_errors=True)
  return folder


@errors.one_line_errors
def main(argv=None) -> None:
  parser = errors.ArgumentParser(prog='python -m poolformers_jax.data.generators.pathfinder',
                                 description=__doc__.split('\n\n')[0])
  parser.add_argument('--out_dir', required=True, help='where to write the images')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--resolution', type=int, default=32, choices=sorted(LRA_SETTINGS))
  parser.add_argument('--difficulty', default='curv_baseline',
                      choices=sorted(lra.PATHFINDER_DIFFICULTIES))
  parser.add_argument('--num_examples', type=int, default=200000)
  parser.add_argument('--images_per_file', type=int, default=1000)
  parser.add_argument('--workers', type=int, default=None, help='default: all cores')
  args = parser.parse_args(argv)
  folder = generate(args.out_dir, seed=args.seed, resolution=args.resolution,
                    difficulty=args.difficulty, num_examples=args.num_examples,
                    images_per_file=args.images_per_file, workers=args.workers)
  print(f'{args.num_examples} images in {folder}')


if __name__ == '__main__':
  main()
