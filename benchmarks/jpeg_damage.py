"""Damage real photos the way disks and transfers do, build-check each copy, and count what the
build would store, what it would refuse, and whether what it stores is garbled.

    python -m benchmarks.jpeg_damage                       # the corpus photos, 20 damages each
    python -m benchmarks.jpeg_damage --photos DIR ... --per_variant 40 --seed 1

Each photo is encoded as the JPEGs people have (its own bytes when it is one; baseline 4:2:0 and
4:4:4, progressive, with restart markers, grey), then damaged at a random place of its data: a
run of 400 zeroed bytes, 200 random bytes, 3 flipped bits, a cut file, a 1 KB run copied from
elsewhere in the file. Each copy goes through the build's image check (`normalise_image`, the
default policy and with `keep_stray_jpeg_bytes`). A stored copy is decoded in full and compared
with the undamaged one: `identical`, `local` (at most 2 rows of 8x8 blocks differ) or `garbled`;
and decoded by every reader (Pillow, `tf.io.decode_jpeg`, libjpeg-turbo strictly): a failure
there is a defect of the build. The clean variants are checked too: each must be stored as it
is (a refusal there is a false alarm). Prints a table by outcome and by libjpeg's first warning.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import pathlib
import random
import re
import time

import numpy as np
import simplejpeg
from PIL import Image, ImageFile

from beam_pipeline.core.images import ImagePolicy, normalise_image
from beam_pipeline.core.rejections import InputError

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests/data/corpus/images"
DAMAGES = ("zeros400", "random200", "flip3", "cut", "copy1k")
VARIANTS = ("as_is", "baseline420", "baseline444", "progressive", "restart", "grey")


def photo_paths(folders: list[str]) -> list[pathlib.Path]:
    """The photos (JPEG and PNG files of at least 64x64) under `folders`."""
    found = []
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob("*")):
            if path.suffix.lower() not in (".jpg", ".jpeg", ".png") or not path.is_file():
                continue
            try:
                with Image.open(path) as image:
                    image.load()
                    if min(image.size) >= 64:
                        found.append(path)
            except Exception:  # noqa: BLE001 - a damaged test file is no seed
                continue
    return found


def variants(path: pathlib.Path) -> dict[str, bytes]:
    """The JPEG encodings of one photo (its own bytes when it is a JPEG)."""
    data = path.read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
    out = {}
    if data[:2] == b"\xff\xd8":
        out["as_is"] = data
    settings = {
        "baseline420": {"subsampling": 2},
        "baseline444": {"subsampling": 0},
        "progressive": {"progressive": True},
        "restart": {"restart_marker_rows": 1},
    }
    for name, kwargs in settings.items():
        buffer = io.BytesIO()
        rgb.save(buffer, "JPEG", quality=90, **kwargs)
        out[name] = buffer.getvalue()
    buffer = io.BytesIO()
    rgb.convert("L").save(buffer, "JPEG", quality=90)
    out["grey"] = buffer.getvalue()
    return out


def data_start(data: bytes) -> int:
    """Where the first scan's entropy-coded data begins (after its SOS header)."""
    position = 2
    while position + 4 <= len(data):
        marker, length = data[position + 1], int.from_bytes(data[position + 2 : position + 4])
        if marker == 0xDA:
            return position + 2 + length
        position += 2 + length
    return len(data) // 2


def damage(data: bytes, kind: str, rng: random.Random) -> bytes:
    """One copy of `data` damaged by `kind` at a random place of its data."""
    start, end = data_start(data), len(data) - 2
    at = rng.randrange(start, max(start + 1, end - 1))
    if kind == "zeros400":
        return data[:at] + bytes(min(400, end - at)) + data[at + 400 :]
    if kind == "random200":
        run = bytes(rng.randrange(256) for _ in range(200))
        return data[:at] + run[: max(0, end - at)] + data[at + 200 :]
    if kind == "flip3":
        out = bytearray(data)
        for _ in range(3):
            spot = rng.randrange(start, end)
            out[spot] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "cut":
        return data[:at]
    if kind == "copy1k":
        source = rng.randrange(start, max(start + 1, end - 1024))
        return data[:at] + data[source : source + 1024] + data[at + 1024 :]
    raise ValueError(kind)


def lenient_pixels(data: bytes) -> np.ndarray | None:
    """What a tolerant reader shows: Pillow with truncated images allowed, as RGB."""
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB"), dtype=np.int16)
    except Exception:  # noqa: BLE001 - nothing decodes
        return None
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = False


def compare(stored: bytes, clean: bytes) -> str:
    """`identical`, `local` (at most 2 block rows differ) or `garbled`."""
    got, want = lenient_pixels(stored), lenient_pixels(clean)
    if got is None or want is None or got.shape != want.shape:
        return "garbled"
    rows = np.abs(got - want).mean(axis=(1, 2)) > 2
    if not rows.any():
        return "identical"
    return "local" if rows.sum() <= 16 else "garbled"


def reader_failures(data: bytes) -> list[str]:
    """The readers that cannot decode `data` in full."""
    import tensorflow as tf

    failed = []
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception:  # noqa: BLE001
        failed.append("pillow")
    try:
        tf.io.decode_jpeg(data, channels=3).numpy()
    except Exception:  # noqa: BLE001
        failed.append("tensorflow")
    try:
        simplejpeg.decode_jpeg(data, strict=True)
    except ValueError:
        failed.append("libjpeg-turbo strict")
    return failed


def first_warning(data: bytes) -> str:
    """libjpeg-turbo's first complaint about `data`, numbers taken out (or `none`)."""
    try:
        simplejpeg.decode_jpeg(data, strict=True)
        return "none"
    except ValueError as error:
        return re.sub(r"\d+ extraneous", "N extraneous", str(error).strip())


@dataclasses.dataclass
class Tally:
    outcomes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    warnings: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    defects: list = dataclasses.field(default_factory=list)
    false_alarms: list = dataclasses.field(default_factory=list)


def check(data: bytes, clean: bytes, policy: ImagePolicy, tally: Tally, label: str) -> None:
    """Counts what the build does with one damaged copy."""
    try:
        image = normalise_image(data, policy)
    except InputError as error:
        tally.outcomes[f"rejected {error.reason}"] += 1
        return
    verdict = compare(image.data, clean)
    note = " (reported)" if image.note else ""
    tally.outcomes[f"stored {verdict}{note}"] += 1
    if verdict != "identical":
        tally.warnings[(first_warning(data), verdict + note)] += 1
    failed = reader_failures(image.data)
    if failed:
        tally.defects.append(f"{label}: stored, but {', '.join(failed)} cannot decode it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", nargs="+", default=[str(CORPUS)])
    parser.add_argument("--per_variant", type=int, default=20, help="damaged copies per JPEG")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    policies = {"default": ImagePolicy(), "keep": ImagePolicy(keep_stray_jpeg_bytes=True)}
    tallies = {name: Tally() for name in policies}
    photos = photo_paths(args.photos)
    started, seeds, copies = time.perf_counter(), 0, 0
    for path in photos:
        for variant, clean in variants(path).items():
            seeds += 1
            for name, policy in policies.items():
                try:
                    kept = normalise_image(clean, policy)
                    if kept.note or (
                        not kept.reencoded and compare(kept.data, clean) != "identical"
                    ):
                        raise InputError("changed", kept.note or "stored with other pixels")
                except InputError as error:
                    tallies[name].false_alarms.append(f"{path.name} {variant}: {error}")
            for number in range(args.per_variant):
                kind = DAMAGES[number % len(DAMAGES)]
                damaged = damage(clean, kind, rng)
                copies += 1
                for name, policy in policies.items():
                    label = f"{path.name} {variant} {kind} #{number}"
                    check(damaged, clean, policy, tallies[name], label)
    elapsed = time.perf_counter() - started
    print(f"{len(photos)} photos, {seeds} clean JPEGs, {copies} damaged copies, {elapsed:.0f} s")
    for name, tally in tallies.items():
        print(f"\n## policy: {name}")
        for outcome, count in sorted(tally.outcomes.items()):
            print(f"  {count:6d}  {outcome}")
        print("  stored and not identical, by libjpeg's first warning:")
        for (warning, verdict), count in sorted(tally.warnings.items()):
            print(f"  {count:6d}  {verdict:20s} {warning}")
        alarms = len(tally.false_alarms)
        print(f"  clean JPEGs refused, reported or stored with other pixels: {alarms}")
        for line in tally.false_alarms[:20]:
            print(f"    {line}")
        print(f"  reader failures on stored images: {len(tally.defects)}")
        for line in tally.defects[:20]:
            print(f"    {line}")
    return 1 if any(t.defects for t in tallies.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
