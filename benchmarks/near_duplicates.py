"""Near duplicates: which hash and radius find copies and leave different photos apart, and
what the fingerprints cost (issue 41; `beam_pipeline/core/quality/fingerprints.py`).

    python -m benchmarks.near_duplicates [--max_radius 12] [--tree_copies 100]
        [--bench_images 600] [--repeats 5] [--search_sizes 1330000] [--search_radii 4,5,6]
        [--crowd 10000] [--max_run 8192]
        [--only radii,tiles,tree,scales,sides,uniform,grey,cost,search]

Offline, on the real photos of tests/data/corpus (and matplotlib's `grace_hopper.jpg`, the
portrait Pillow's `hopper.jpg` is cut from, where matplotlib is installed). Every file is hashed
as the build would: a JPEG from its decode at `hash_scale` (1/8 DCT scale where the shorter side
keeps 32 px) by libjpeg-turbo in RGB (`simplejpeg`, strict, as the build's check decodes);
other formats from their full decode converted to RGB as the build does. "build" is the hash
the build keeps (`fingerprint`: phash of a bilinear 32x32 thumbnail); "phash" and "dhash" are
ImageHash's.

- radii: planted copies of each photo (exact bytes; re-encoded at quality 50-95; resized 0.5x
  and 0.25x; cropped by 2, 4, 8 px on all sides or one) against what must stay apart: the
  mirror image, every pair of different photos, parts of different photos (quadrants), and
  views of one scene (panned by 10% or 20% of the width; two quadrants of one photo). Per
  hash and radius 0..max: copies found, and pairs found of the rest.
- tiles: every photo cut into 1, 4, 9 and 16 tiles: pairs of tiles of different photos (and
  of one photo) within the radius: dark, flat and smoothly shaded pictures among them.
- tree: the same copies of `--tree_copies` images made as `benchmarks/make_tree.py` makes the
  benchmark trees (300-500 px, ImageNet's sizes).
- scales, sides: the hash of the small decode against the full decode's.
- uniform: each photo faded to 1/2 .. 1/100 of its contrast (its luma spread, and whether its
  hash still finds it), and 200 blank pictures (how their hashes crowd). grey: the chroma
  spread of grey pictures stored as colour JPEGs against the corpus's.
- cost: CPU per image, one process, best of `--repeats`, on `--bench_images` tree images: the
  1/8-scale decode the build already does, and what the fingerprints add to it.
- search: the multi-index search on `--search_sizes` synthetic hashes (uniformly random, 1% of
  them copies of others 0..radius bits away): comparisons, pairs, seconds and the peak bytes
  NumPy allocates (tracemalloc); with a crowd of identical hashes, with and without a cap.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import pathlib
import platform
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import simplejpeg
from PIL import Image

from beam_pipeline.core.formats import sniff_format
from beam_pipeline.core.images import to_rgb
from beam_pipeline.core.jpegdata import at_scale, strict_decode
from beam_pipeline.core.quality import fingerprints as fp
from beam_pipeline.core.quality import hash_search as hs

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests/data/corpus/images"
PHOTOS = [
    *sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("tfrecorder/*/*/*.jpg")),
    "pillow/junk_jpeg_header.jpg",  # a field of grass, 1024x768
    "pillow/app13-multiple.jpg",  # three puppies, 256x160
    "pillow/hopper.jpg",  # Grace Hopper, 128x128
    "pillow/transparent.png",  # three dice on transparency, 200x150
    "pillow/pil_sample_rgb.jpg",  # "RED" lettering, 100x100
    "pillow/invalid-exif.jpg",  # a soft light in the dark, 200x200
]
HASHES: dict[str, Callable] = {
    "build (phash, bilinear)": fp.perceptual_hash,
    "phash": fp.phash,
    "dhash": fp.dhash,
}
QUALITIES = (50, 60, 70, 80, 90, 95)
KINDS = ("re-encoded", "resized", "cropped")


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def small_decode(data: bytes, scale: int | None = None) -> np.ndarray:
    """The decode the build hashes: a JPEG decoded by libjpeg-turbo at `hash_scale` (or
    `scale`; 1 = full size) in RGB (luma for a grey JPEG), anything else decoded in full and
    converted to RGB as the build converts it."""
    image = Image.open(io.BytesIO(data))
    if sniff_format(data) == "JPEG" and image.mode in ("RGB", "L"):
        scale = fp.hash_scale(*image.size) if scale is None else scale
        space = "RGB" if image.mode == "RGB" else "GRAY"
        return strict_decode(data, space, **at_scale(image.size, scale)).pixels
    image.load()
    return np.asarray(to_rgb(image))


def photos() -> list[tuple[str, bytes, Image.Image]]:
    """(name, file bytes, RGB pixels) of the real photos."""
    found = []
    for name in PHOTOS:
        data = (CORPUS / name).read_bytes()
        image = Image.open(io.BytesIO(data))
        image.load()
        found.append((pathlib.Path(name).stem, data, to_rgb(image)))
    return found


def planted(data: bytes, image: Image.Image) -> list[tuple[str, str, bytes]]:
    """(kind, variant, bytes) of the copies of one photo."""
    width, height = image.size
    copies = [("exact", "exact", data)]
    copies += [("re-encoded", f"quality {q}", jpeg(image, q)) for q in QUALITIES]
    for factor in (0.5, 0.25):
        size = (max(1, round(width * factor)), max(1, round(height * factor)))
        resized = image.resize(size, Image.Resampling.BICUBIC)
        copies.append(("resized", f"{factor}x", jpeg(resized)))
    for px in (2, 4, 8):
        copies.append(
            ("cropped", f"{px} px all sides", jpeg(image.crop((px, px, width - px, height - px))))
        )
        copies.append(("cropped", f"{px} px one side", jpeg(image.crop((px, 0, width, height)))))
    return copies


def parts(image: Image.Image) -> dict[str, Image.Image]:
    """Views of one scene: the four quadrants, and the left and right 90% and 80%."""
    w, h = image.size
    views = {
        f"q{i}": image.crop((x, y, x + w // 2, y + h // 2))
        for i, (x, y) in enumerate(itertools.product((0, w // 2), (0, h // 2)))
    }
    for keep in (90, 80):
        views[f"left{keep}"] = image.crop((0, 0, w * keep // 100, h))
        views[f"right{keep}"] = image.crop((w - w * keep // 100, 0, w, h))
    return views


def print_table(header: list[str], rows: list[list]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print()


def corpus_distances() -> dict[str, dict[str, list[int]]]:
    """Per hash, per kind of pair, the Hamming distances of every pair of that kind."""
    found: dict[str, dict[str, list[int]]] = {name: {} for name in HASHES}
    shots = photos()
    for name, hash_of in HASHES.items():
        add = lambda kind, a, b, d=found[name]: d.setdefault(kind, []).append(fp.hamming(a, b))  # noqa: E731
        wholes, quads = [], []
        for _stem, data, image in shots:
            own = hash_of(small_decode(data))
            wholes.append(own)
            for kind, _variant, copy in planted(data, image):
                add(kind, own, hash_of(small_decode(copy)))
            mirror = jpeg(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT))
            add("mirrored", own, hash_of(small_decode(mirror)))
            views = {k: hash_of(small_decode(jpeg(v))) for k, v in parts(image).items()}
            add("pan 10%", views["left90"], views["right90"])
            add("pan 20%", views["left80"], views["right80"])
            quad = [views[f"q{i}"] for i in range(4)]
            for a, b in itertools.combinations(quad, 2):
                add("quadrants of one photo", a, b)
            quads.append(quad)
        for a, b in itertools.combinations(wholes, 2):
            add("different photos", a, b)
        for (qa, wa), (qb, wb) in itertools.combinations(zip(quads, wholes, strict=True), 2):
            for a, b in itertools.product([*qa, wa], [*qb, wb]):
                if (a, b) != (wa, wb):
                    add("parts of different photos", a, b)
        grace = _grace_hopper()
        if grace is not None:
            add(
                "same portrait, other framing",
                hash_of(small_decode(grace)),
                wholes[PHOTOS.index("pillow/hopper.jpg")],
            )
    return found


def _grace_hopper() -> bytes | None:
    try:
        import matplotlib.cbook
    except ImportError:
        return None
    return pathlib.Path(
        matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    ).read_bytes()


def report_radii(found: dict[str, dict[str, list[int]]], max_radius: int) -> None:
    copies = ["exact", *KINDS]
    apart = [k for k in next(iter(found.values())) if k not in copies]
    for name, kinds in found.items():
        print(f"### {name}: share of pairs within the radius (copies: recall; the rest: found)\n")
        every = [d for k in copies for d in kinds[k]]
        header = [
            "radius",
            *(f"{k} ({len(kinds[k])})" for k in KINDS),
            f"all copies ({len(every)})",
        ]
        header += [f"{k} ({len(kinds[k])})" for k in apart]
        rows = []
        for radius in range(max_radius + 1):
            share = lambda ds, r=radius: f"{sum(d <= r for d in ds)}"  # noqa: E731
            rows.append(
                [
                    radius,
                    *(share(kinds[k]) for k in KINDS),
                    share(every),
                    *(share(kinds[k]) for k in apart),
                ]
            )
        print_table(header, rows)
        print("distances: " + "; ".join(f"{k} {_summary(v)}" for k, v in kinds.items()) + "\n")


def _summary(values: list[int]) -> str:
    return f"{min(values)}-{max(values)} (median {int(np.median(values))})"


def report_tiles() -> None:
    """Hard negatives: every photo cut into 1, 4, 9 and 16 tiles (dark, flat and smoothly
    shaded ones among them; nearly uniform tiles left out, as the build leaves them out)."""
    tiles = []
    for stem, _data, image in photos():
        width, height = image.size
        for grid in (1, 2, 3, 4):
            for i, j in itertools.product(range(grid), range(grid)):
                box = (i * width // grid, j * height // grid)
                box += ((i + 1) * width // grid, (j + 1) * height // grid)
                tile = image.crop(box)
                if min(tile.size) >= 24:
                    decoded = small_decode(jpeg(tile))
                    if fp.fingerprint(decoded).luma_spread > fp.UNIFORM_SPREAD:
                        tiles.append((stem, {n: h(decoded) for n, h in HASHES.items()}))
    radii = (0, 4, 6, 7, 8, 10, 12)
    rows = []
    for label, same in (("tiles of different photos", False), ("tiles of one photo", True)):
        pairs = [(a, b) for a, b in itertools.combinations(tiles, 2) if (a[0] == b[0]) == same]
        for name in HASHES:
            distances = np.array([fp.hamming(a[1][name], b[1][name]) for a, b in pairs])
            rows.append([label, name, len(pairs), *(int((distances <= r).sum()) for r in radii)])
    print(f"### {len(tiles)} tiles of the {len(PHOTOS)} photos: pairs within the radius\n")
    print_table(["pairs", "hash", "of", *(f"radius {r}" for r in radii)], rows)


def report_tree_copies(count: int) -> None:
    """Planted copies of benchmark-tree images (300-500 px, as ImageNet's): recall per variant."""
    found: dict[str, dict[str, list[int]]] = {name: {} for name in HASHES}
    for data in bench_images(count):
        image = Image.open(io.BytesIO(data)).convert("RGB")
        copies = planted(data, image)[1:]
        for name, hash_of in HASHES.items():
            own = hash_of(small_decode(data))
            for kind, variant, copy in copies:
                label = variant if kind == "cropped" else kind
                distance = fp.hamming(own, hash_of(small_decode(copy)))
                found[name].setdefault(label, []).append(distance)
    radii = (4, 5, 6, 8)
    rows = [
        [name, label, len(distances), *(f"{np.mean(np.array(distances) <= r):.3f}" for r in radii)]
        for name, kinds in found.items()
        for label, distances in kinds.items()
    ]
    print(f"### Planted copies of {count} benchmark-tree images: share within the radius\n")
    print_table(["hash", "copy", "pairs", *(f"radius {r}" for r in radii)], rows)


def report_scales() -> None:
    """The hash of the decode the build hashes against the full decode's."""
    rows = []
    for name, hash_of in HASHES.items():
        for label, scale in (("hash_scale (>= 32 px)", None), ("always 1/8", 8)):
            distances, large = [], []
            for _stem, data, image in photos():
                for _kind, _variant, copy in [("", "", data), *planted(data, image)]:
                    d = fp.hamming(
                        hash_of(small_decode(copy, 1)), hash_of(small_decode(copy, scale))
                    )
                    distances.append(d)
                    if min(Image.open(io.BytesIO(copy)).size) >= 256:
                        large.append(d)
            rows.append([name, label, _summary(distances), _summary(large) if large else "-"])
    print("### The small decode's hash against the full decode's (photos and their copies)\n")
    print_table(["hash", "decode hashed", "distance, all files", "files >= 256 px"], rows)


def report_sides() -> None:
    """Agreement of the 1/8 decode's hash with the full decode's against the image's size."""
    large = [image for _stem, _data, image in photos() if min(image.size) >= 400]
    rows = []
    for side in (64, 96, 128, 160, 200, 256, 320, 400):
        row: list = [side, -(-side // 8)]
        for hash_of in HASHES.values():
            distances = []
            for image in large:
                w, h = image.size
                size = (side * w // min(w, h), side * h // min(w, h))
                data = jpeg(image.resize(size, Image.Resampling.BICUBIC))
                distances.append(
                    fp.hamming(hash_of(small_decode(data, 1)), hash_of(small_decode(data, 8)))
                )
            row.append(_summary(distances))
        rows.append(row)
    print(f"### 1/8 decode against full decode by shorter side ({len(large)} photos >= 400 px)\n")
    print_table(["shorter side px", "at 1/8 px", *HASHES], rows)


def report_uniform(radius: int) -> None:
    """Photos with their contrast cut: luma spread, and whether the hash still finds them; and
    blank pictures: how their hashes crowd together."""
    shots = photos()
    rows = []
    for divisor in (1, 2, 5, 10, 20, 30, 50, 100):
        faint = {}
        for stem, _data, image in shots:
            pixels = np.asarray(image, dtype=np.float64)
            pixels = pixels.mean() + (pixels - pixels.mean()) / divisor
            faint[stem] = small_decode(jpeg(Image.fromarray(np.rint(pixels).astype(np.uint8))))
        spreads = [fp.fingerprint(v).luma_spread for v in faint.values()]
        row = [f"1/{divisor}", _summary(spreads), sum(s <= fp.UNIFORM_SPREAD for s in spreads)]
        for hash_of in HASHES.values():
            own = [fp.hamming(hash_of(small_decode(d)), hash_of(faint[s])) for s, d, _ in shots]
            hashes = [hash_of(v) for v in faint.values()]
            apart = [fp.hamming(a, b) for a, b in itertools.combinations(hashes, 2)]
            row += [sum(d <= radius for d in own), sum(d <= radius for d in apart)]
        rows.append(row)
    pairs = len(shots) * (len(shots) - 1) // 2
    print(f"### Contrast cut ({len(shots)} photos, {pairs} pairs; radius {radius})\n")
    header = ["contrast", "luma spread", f"nearly uniform (<= {fp.UNIFORM_SPREAD})"]
    for name in HASHES:
        header += [f"{name}: finds its photo", f"{name}: pairs of photos"]
    print_table(header, rows)
    blank = blank_pictures()
    spreads = [fp.fingerprint(v).luma_spread for v in blank]
    kept = [v for v, s in zip(blank, spreads, strict=True) if s > fp.UNIFORM_SPREAD]
    rows = []
    for name, hash_of in HASHES.items():
        row = [name]
        for group in (blank, kept):
            hashes = [hash_of(v) for v in group]
            close = sum(fp.hamming(a, b) <= radius for a, b in itertools.combinations(hashes, 2))
            common = max(hashes.count(h) for h in set(hashes)) if hashes else 0
            row += [f"{close} of {len(group) * (len(group) - 1) // 2}", common]
        rows.append(row)
    print(
        f"### {len(blank)} blank pictures (luma spread {_summary(spreads)}; "
        f"{len(blank) - len(kept)} nearly uniform): pairs within radius {radius}\n"
    )
    print_table(["hash", "all: pairs", "all: most on one hash", "the rest: pairs", "most"], rows)


def blank_pictures(count: int = 200) -> list[np.ndarray]:
    """One random colour each, noise of 0-4 levels, a gradient of 0-8 levels across, 200-640
    px a side, quality 75-95: decoded as the build decodes them."""
    rng = np.random.default_rng(1)
    found = []
    for _ in range(count):
        width, height = (int(v) for v in rng.integers(200, 640, 2))
        ramp = np.linspace(0, float(rng.choice([0, 0, 4, 8])), width)[None, :, None]
        pixels = rng.integers(0, 256, 3) + ramp * rng.choice([-1, 1])
        pixels = pixels + rng.normal(0, float(rng.choice([0, 1, 2, 4])), (height, width, 3))
        picture = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))
        found.append(small_decode(jpeg(picture, int(rng.integers(75, 96)))))
    return found


def report_grey() -> None:
    """Chroma spread (`is_grey`) of grey pictures stored as RGB JPEGs and of the corpus's
    pictures, from the build's RGB decode."""
    grey, colour = [], []
    for stem, data, image in photos():
        for quality in (50, 75, 95):
            decoded = small_decode(jpeg(image.convert("L").convert("RGB"), quality))
            grey.append(fp.fingerprint(decoded).chroma_spread)
        colour.append((stem, fp.fingerprint(small_decode(data)).chroma_spread))
    print("### Chroma spread of the build's RGB decode\n")
    limit = fp.GREY_SPREAD
    print_table(
        ["pictures", "chroma spread", f"grey (<= {limit})"],
        [
            [
                f"grey, as RGB JPEG q50/75/95 ({len(grey)})",
                _summary(grey),
                sum(s <= limit for s in grey),
            ],
            [
                f"the corpus's pictures ({len(colour)})",
                ", ".join(
                    f"{s} ({stem})" if s <= limit else str(s)
                    for stem, s in sorted(colour, key=lambda c: c[1])
                ),
                sum(s <= limit for _, s in colour),
            ],
        ],
    )


def bench_images(count: int) -> list[bytes]:
    """`count` images made as the benchmark trees' (`benchmarks/make_tree.py`)."""
    from benchmarks.make_tree import make_image

    with tempfile.TemporaryDirectory() as root:
        for index in range(count):
            make_image((root, index, 0))
        files = sorted(pathlib.Path(root).rglob("*.JPEG"))
        return [path.read_bytes() for path in files]


def best_per_item(works: dict[str, tuple[Callable, list]], repeats: int) -> dict[str, float]:
    """CPU microseconds per item of each (work, items), this process's alone (neighbours do not
    inflate it): the best of `repeats` rounds, each round running every work in turn."""
    best = dict.fromkeys(works, float("inf"))
    for _ in range(repeats):
        for key, (work, items) in works.items():
            start = time.process_time()
            for item in items:
                work(item)
            best[key] = min(best[key], (time.process_time() - start) / len(items) * 1e6)
    return best


def _decode(pair: tuple[bytes, tuple[int, int]], space: str, scale: int) -> np.ndarray:
    data, size = pair
    return simplejpeg.decode_jpeg(data, colorspace=space, **at_scale(size, scale))


def report_cost(count: int, repeats: int, build_ms: list[tuple[str, float]]) -> None:
    images = bench_images(count)
    pairs = [(d, Image.open(io.BytesIO(d)).size) for d in images]
    grey8 = [_decode(p, "GRAY", 8) for p in pairs]
    rgb8 = [_decode(p, "RGB", 8) for p in pairs]
    prints = [(fp.fingerprint(a), a.shape) for a in rgb8]
    small = [p for p in pairs if fp.hash_scale(*p[1]) < 8]
    share = len(small) / len(images)
    steps = {
        "check": ("the build's check: 1/8 decode in luma", lambda p: _decode(p, "GRAY", 8), pairs),
        "rgb": ("the same in RGB", lambda p: _decode(p, "RGB", 8), pairs),
        "sha": ("content_hash (SHA-256 of the bytes)", fp.content_hash, images),
        "dhash": ("ImageHash's dhash of the 1/8 luma", fp.dhash, grey8),
        "phash": ("ImageHash's phash of the 1/8 luma", fp.phash, grey8),
        "luma": ("fingerprint of the 1/8 luma", fp.fingerprint, grey8),
        "print": ("fingerprint of the 1/8 RGB (+ chroma spread)", fp.fingerprint, rgb8),
        "odd": ("odd_reasons", lambda f: fp.odd_reasons(f[1][1] * 8, f[1][0] * 8, f[0]), prints),
        "small8": (
            f"the {share:.0%} under 256 px: RGB at 1/8",
            lambda p: _decode(p, "RGB", 8),
            small,
        ),
        "small": (
            f"the {share:.0%} under 256 px: RGB at hash_scale",
            lambda p: _decode(p, "RGB", fp.hash_scale(*p[1])),
            small,
        ),
    }
    if not small:
        del steps["small8"], steps["small"]
    us = best_per_item({key: (work, items) for key, (_, work, items) in steps.items()}, repeats)
    print(f"### Cost per image, one process, best of {repeats} ({len(images)} tree images)\n")
    print_table(
        ["step", "us per image"],
        [[label, f"{us[key]:.1f}"] for key, (label, _, _) in steps.items()],
    )
    rescale = max(0.0, us.get("small", 0.0) - us.get("small8", 0.0)) * share
    second = us.get("small", 0.0) * share
    rgb = max(0.0, us["rgb"] - us["check"])
    added = {
        "RGB check at hash_scale + fingerprint + odd_reasons": rgb
        + rescale
        + us["print"]
        + us["odd"],
        "the same + content_hash computed anew": rgb
        + rescale
        + us["print"]
        + us["odd"]
        + us["sha"],
        "the same, a second decode under 256 px instead": rgb + second + us["print"] + us["odd"],
        "luma check at hash_scale (no grey check)": rescale + us["luma"] + us["odd"],
    }
    rows = [
        [label, f"{extra:.1f}", *(f"{ms * 1000 / (ms * 1000 + extra):.3f}" for _, ms in build_ms)]
        for label, extra in added.items()
    ]
    print("### Throughput with the fingerprints against without (CPU per image of the build)\n")
    print_table(["added", "us", *(f"{name} ({ms:.2f} ms)" for name, ms in build_ms)], rows)


def synthetic(
    n: int, radius: int, share: float = 0.01, seed: int = 0
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """`n` random 64-bit hashes, the last `share` of them copies of others with 0..`radius`
    bits flipped; and the planted pairs (first indices, second indices)."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    count = int(n * share)
    sources = rng.choice(n - count, count, replace=False)
    for offset, source in enumerate(sources.tolist()):
        flips = rng.choice(64, int(rng.integers(0, radius + 1)), replace=False)
        mask = sum(1 << int(bit) for bit in flips)
        hashes[n - count + offset] = np.uint64(int(hashes[source]) ^ mask)
    return hashes, (sources, n - count + np.arange(count))


def measure_search(hashes: np.ndarray, radius: int, max_run: int | None) -> dict:
    """`search`, block by block (`scan_block`, as `search` runs them) under tracemalloc:
    seconds, pairs, crowded hashes, comparisons, and the peak bytes NumPy allocates for one
    block (beyond the hashes and the pairs found so far) and for the whole search."""
    k = radius + 1
    comparisons = 0
    for shift, width in hs.block_layout(k):
        keys = ((hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)).astype(np.int64)
        counts = np.bincount(keys)
        counts = counts[counts <= max_run] if max_run is not None else counts
        comparisons += int((counts * (counts - 1) // 2).sum())
    parts, seconds, block_peak, search_peak = [], 0.0, 0, 0
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for index in range(k):
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        parts.append(hs.scan_block(hashes, index, k, radius, max_run))
        seconds += time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        block_peak, search_peak = max(block_peak, peak - held), max(search_peak, peak - base)
    tracemalloc.stop()
    pairs = np.concatenate([part[0] for part in parts]) * len(hashes)
    pairs += np.concatenate([part[1] for part in parts])
    crowded = np.unique(np.concatenate([part[3] for part in parts]))
    return {
        "codes": pairs,
        "crowded": len(crowded),
        "seconds": seconds,
        "comparisons": comparisons,
        "block_peak": block_peak,
        "search_peak": search_peak,
    }


def chance_pairs(n: int, radius: int) -> float:
    """Pairs of `n` uniformly random 64-bit hashes expected within `radius` bits."""
    from math import comb

    return n * (n - 1) / 2 * sum(comb(64, d) for d in range(radius + 1)) / 2**64


def report_search(
    sizes: list[int], radii: list[int], crowd: int, max_run: int, default: int
) -> None:
    rows = []
    for n, radius in itertools.product(sizes, radii):
        hashes, (sources, copies) = synthetic(n, radius)
        cases = [("random, 1% planted copies", hashes, None)]
        if crowd and radius == default:
            crowded = np.concatenate([hashes, np.zeros(crowd, dtype=np.uint64)])
            cases.append((f"+ {crowd:,} identical", crowded, None))
            cases.append((f"+ {crowd:,} identical, max_run {max_run:,}", crowded, max_run))
        for label, values, cap in cases:
            m = measure_search(values, radius, cap)
            planted = np.isin(sources * len(values) + copies, m["codes"]).mean()
            widths = sorted({w for _, w in hs.block_layout(radius + 1)})
            rows.append(
                [
                    f"{n:,} {label}",
                    radius,
                    f"{radius + 1} ({'/'.join(map(str, widths))} bits)",
                    f"{m['comparisons']:,}",
                    f"{len(m['codes']):,}",
                    f"{planted:.4f}",
                    f"{chance_pairs(n, radius):.2g}",
                    f"{m['crowded']:,}",
                    f"{m['seconds']:.1f}",
                    f"{m['block_peak'] / 2**20:.0f}",
                    f"{m['search_peak'] / 2**20:.0f}",
                    f"{m['block_peak'] / len(values):.0f}",
                ]
            )
    print("### Multi-index search, one process (per block: sort by block value, compare runs)\n")
    header = ["hashes", "radius", "blocks", "comparisons", "pairs", "planted found"]
    header += ["chance pairs", "crowded out", "seconds", "peak MiB, one block"]
    header += ["peak MiB, search", "bytes per hash, one block"]
    print_table(header, rows)


def machine() -> str:
    """CPU, cores and library versions, for the record."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        models = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((m.split(":", 1)[1].strip() for m in models if m.startswith("model name")), cpu)
    return (
        f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, numpy "
        f"{np.__version__}, Pillow {Image.__version__}, simplejpeg {simplejpeg.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max_radius", type=int, default=12)
    parser.add_argument(
        "--radius", type=int, default=fp.DEFAULT_RADIUS, help="for the contrast table"
    )
    parser.add_argument("--bench_images", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--search_sizes", default="1330000")
    parser.add_argument("--search_radii", default="4,5,6")
    parser.add_argument(
        "--crowd", type=int, default=10_000, help="identical hashes added (0: none)"
    )
    parser.add_argument("--max_run", type=int, default=8192)
    parser.add_argument(
        "--build_ms",
        default="1,658 img/s on 2 cores:1.205;300 img/s on 2 cores:6.67",
        help="the build's CPU ms per image to compare with (label:ms;...)",
    )
    parser.add_argument("--tree_copies", type=int, default=100)
    parser.add_argument("--only", default="radii,tiles,tree,scales,sides,uniform,grey,cost,search")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    build_ms = [
        (label, float(ms))
        for label, ms in (item.rsplit(":", 1) for item in args.build_ms.split(";"))
    ]
    print(machine() + "\n")
    if "radii" in only:
        report_radii(corpus_distances(), args.max_radius)
    if "tiles" in only:
        report_tiles()
    if "tree" in only:
        report_tree_copies(args.tree_copies)
    if "scales" in only:
        report_scales()
    if "sides" in only:
        report_sides()
    if "uniform" in only:
        report_uniform(args.radius)
    if "grey" in only:
        report_grey()
    if "cost" in only:
        report_cost(args.bench_images, args.repeats, build_ms)
    if "search" in only:
        sizes = [int(s) for s in args.search_sizes.split(",")]
        radii = [int(r) for r in args.search_radii.split(",")]
        report_search(sizes, radii, args.crowd, args.max_run, fp.DEFAULT_RADIUS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
