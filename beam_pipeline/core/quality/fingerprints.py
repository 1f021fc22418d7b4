"""Fingerprints of an image: exact copies, near copies and odd images, from its small decode.

Pure functions of bytes, pixels and sizes, for the shard writer to call on the decode it
already does, and for the grouping that finds copies at any scale (issue 41):

- `content_hash`: exact copies, the stored bytes' SHA-256 cut to 16 bytes.
- `fingerprint`: the near-duplicate hash (`perceptual_hash`: ImageHash's `phash`, of a
  bilinear 32x32 thumbnail) with the luma and chroma spreads the odd-image checks read, from
  the decode at `hash_scale` (1/8 DCT scale while the shorter side keeps 32 px). `phash` and
  `dhash` are ImageHash 4.3.2's, bit for bit. Near copies: within `DEFAULT_RADIUS` bits.
  phash, not dhash: dhash drifts to 0 on dark, flat and smoothly shaded pictures (a neighbour
  is rarely brighter), so different ones collide (106 of 53,866 pairs of tiles of different
  photos within 4 bits); phash's bits split at their median (none of them within 7 bits).
- The search for hashes within a radius of each other: `hash_search`.
- `odd_reasons`: nearly uniform, tiny, extreme aspect ratio, grey; reported, never dropped.
  A nearly uniform picture's hash is noise (blank pictures hash alike: a bucket of all of a
  dataset's): leave them out of the near-duplicate search, with one copy per content hash.

Every threshold's figures: `benchmarks/near_duplicates.py`; benchmarks/RESULTS.md,
"Fingerprints (issue 41)".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from PIL import Image

HASH_BITS = 64
# Exact copies: SHA-256 of the stored bytes (the record's `image/key/sha256`), cut to 16
# bytes: 2^-128 per pair leaves a chance collision among 1.33M images at ~1e-27.
CONTENT_HASH_BYTES = 16
# Near copies: hashes within this many bits. Re-encoded (quality 50-95), resized (0.5x,
# 0.25x) and 2-8 px cropped copies of the corpus photos of 400 px and more come within 6;
# mirror images, different photos and their parts at 16 and more. Of 300-500 px tree images
# cropped by 2 px all round, radius 6 finds 98%, radius 4 (5 blocks, not 7: a search of
# 1.33M hashes in 8 s, not 110) 91%.
DEFAULT_RADIUS = 6
# Hash the decode whose shorter side keeps at least this: from 1/8 decodes of 128-250 px
# images the hash strays up to 6 bits from the full decode's, from 32 px on up to 4.
MIN_HASH_SIDE = 32
# Odd images. Nearly uniform: the thumbnail's luma, but for its darkest and brightest 1%,
# within this many levels. 199 of 200 blank pictures (one colour, noise and ramps of a few
# levels) and photos faded to 1/30 of their contrast; none of the corpus photos.
UNIFORM_SPREAD = 8
# Grey: R, G and B within this many levels in 99% of the pixels. Grey pictures stored as
# colour JPEGs (quality 50-95) come out at 0; the least colourful corpus photo at 29.
GREY_SPREAD = 4
# Tiny: a shorter side under this many pixels (7x below a 224 px model input).
TINY_SIDE = 32
# Extreme aspect ratio: one side more than this many times the other.
ASPECT_LIMIT = 3.0

NEARLY_UNIFORM = "nearly_uniform"
TINY = "tiny"
EXTREME_ASPECT_RATIO = "extreme_aspect_ratio"
GREY = "grey"

Pixels = Image.Image | np.ndarray


def content_hash(image_bytes: bytes) -> bytes:
    """The key of exact copies: the first 16 bytes of the SHA-256 of the bytes a record stores
    (the record's own `image/key/sha256`, whose hex digest starts with this one's)."""
    return hashlib.sha256(image_bytes).digest()[:CONTENT_HASH_BYTES]


def hash_scale(width: int, height: int, min_side: int = MIN_HASH_SIDE) -> int:
    """The smallest decode (1/8, 1/4, 1/2 or full DCT scale) of a `width` x `height` JPEG
    whose shorter side is at least `min_side`: the decode to hash."""
    shorter = min(width, height)
    return next((s for s in (8, 4, 2) if -(-shorter // s) >= min_side), 1)


def _luma(image: Pixels) -> Image.Image:
    """A Pillow image, or uint8 pixels ((H, W) grey, (H, W, 1) or (H, W, 3) RGB), as luma
    ("L", by Pillow's ITU-R 601 conversion as ImageHash does)."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise ValueError(f"pixels must be uint8 (H, W[, C]), not {image.dtype} {image.shape}")
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]
        if image.ndim == 3 and image.shape[2] != 3:
            raise ValueError(f"pixels must have 1 or 3 channels, not {image.shape[2]}")
        image = np.ascontiguousarray(image)
        if image.ndim == 2:  # (the JPEG check's luma decode: no copy, 2 us less than fromarray)
            return Image.frombuffer("L", image.shape[::-1], image, "raw", "L", 0, 1)
        image = Image.fromarray(image)
    return image if image.mode == "L" else image.convert("L")


def _to_int(bits: np.ndarray) -> int:
    """64 booleans, row by row, as an int whose most significant bit is the first (the order
    of ImageHash's hex string: `int(str(imagehash.dhash(im)), 16)`)."""
    return int.from_bytes(np.packbits(bits.ravel()).tobytes(), "big")


def dhash(image: Pixels) -> int:
    """ImageHash's `dhash`: luma shrunk to 9x8 (Lanczos), one bit per pair of neighbours in a
    row, set where the right one is brighter. Integer work only: the same bits on every
    machine."""
    small = np.asarray(_luma(image).resize((9, 8), Image.Resampling.LANCZOS))
    return _to_int(small[:, 1:] > small[:, :-1])


# The DCT-II basis of ImageHash's `phash` (8 lowest of 32 frequencies), scaled by 8192 and
# rounded: with 8-bit pixels every product and partial sum is an integer below 2^53, which
# float64 adds exactly in any order, so the bits are the same on every machine and BLAS.
# Keep products small: one of over 2^18 multiply-adds starts OpenBLAS threads in every worker
# process of a build (0.64x its throughput: benchmarks/RESULTS.md, "Fingerprints").
_DCT = np.round(np.cos(np.pi * np.outer(np.arange(8), 2 * np.arange(32) + 1) / 64) * 8192)
_DCT_T = np.ascontiguousarray(_DCT.T)


def _dct_hashes(luma: np.ndarray) -> list[int]:
    """phash's bits of each row of `luma` (n, 1024), a 32x32 luma: its 8x8 lowest frequencies
    above their median."""
    low = (_DCT @ luma.reshape(-1, 32, 32).astype(np.float64) @ _DCT_T).reshape(-1, 64)
    ranked = np.sort(low, axis=1)
    bits = 2 * low > (ranked[:, 31] + ranked[:, 32])[:, None]  # above the mean of the middle two
    return np.packbits(bits, axis=1).view(">u8").ravel().tolist()


def phash(image: Pixels) -> int:
    """ImageHash's `phash`: luma shrunk to 32x32 (Lanczos), its 8x8 lowest DCT-II frequencies,
    one bit each, set above their median. Exact sums (`_DCT`): ImageHash's bits but where a
    coefficient lies within floating-point rounding of the median."""
    return _dct_hashes(np.asarray(_luma(image).resize((32, 32), Image.Resampling.LANCZOS)))[0]


_GREY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "F")


class Fingerprint(NamedTuple):
    """What the build keeps of an image's pixels, from its small decode's 32x32 thumbnail.

    Attributes:
      perceptual: the near-duplicate hash: `phash`'s, of a bilinear thumbnail (3x faster than
        Lanczos at the same recall: benchmarks/near_duplicates.py).
      luma_spread: levels between the darkest and the brightest 1% of the thumbnail's luma.
      chroma_spread: the most R, G and B differ (max - min) in 99% of the decode's pixels (of
        every other one of every other row): 0 for a grey picture and for one-band Pillow
        images; None for a one-channel array (a luma decode says nothing of the colours).
    """

    perceptual: int
    luma_spread: int
    chroma_spread: int | None


def _as_image(image: Pixels) -> Image.Image:
    """uint8 pixels ((H, W), (H, W, 1) or (H, W, 3)) or a Pillow image, as "L" or "RGB"."""
    if isinstance(image, np.ndarray):
        return _luma(image) if image.ndim == 2 or image.shape[-1] == 1 else _rgb(image)
    if image.mode in ("L", "RGB"):
        return image
    return image.convert("L" if image.mode in _GREY_MODES else "RGB")


def _rgb(pixels: np.ndarray) -> Image.Image:
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[2] != 3:
        raise ValueError(
            f"pixels must be uint8 (H, W[, 1 or 3]), not {pixels.dtype} {pixels.shape}"
        )
    return Image.fromarray(np.ascontiguousarray(pixels))


def _trimmed(values: np.ndarray) -> tuple[int, int]:
    """The lowest and the highest of uint8 `values` once their lowest and highest 1% are set
    aside (a radix sort: ~2 us for a thumbnail)."""
    ranked, trim = np.sort(values, axis=None, kind="stable"), values.size // 100
    return int(ranked[trim]), int(ranked[values.size - 1 - trim])


def _chroma(rgb: np.ndarray) -> int:
    """The most R, G and B differ in 99% of every other pixel of every other row of `rgb`."""
    sample = rgb[::2, ::2]
    red, green, blue = sample[:, :, 0], sample[:, :, 1], sample[:, :, 2]
    spread = np.maximum(np.maximum(red, green), blue) - np.minimum(np.minimum(red, green), blue)
    return _trimmed(spread)[1]


def fingerprint(image: Pixels) -> Fingerprint:
    """The perceptual hash, luma spread and chroma spread of one decode (the RGB, or the luma,
    that the build's JPEG check or conversion made): luma first, then one bilinear resize to
    32x32 (ImageHash's order, a third of a Lanczos resize's cost at the same recall)."""
    return fingerprints([image])[0]


def fingerprints(images: Sequence[Pixels]) -> list[Fingerprint]:
    """`fingerprint` of each of `images`: the thumbnails one by one, their spreads and hashes
    in one pass (32 small decodes: 28 us an image, where one at a time took 38)."""
    thumbnails, chromas = [], []
    for image in images:
        picture, chroma = _as_image(image), None if isinstance(image, np.ndarray) else 0
        if picture.mode == "RGB":
            chroma = _chroma(image if isinstance(image, np.ndarray) else np.asarray(picture))
            picture = picture.convert("L")
        thumbnails.append(picture.resize((32, 32), Image.Resampling.BILINEAR).tobytes())
        chromas.append(chroma)
    luma = np.frombuffer(b"".join(thumbnails), dtype=np.uint8).reshape(-1, 1024)
    ranked, trim = np.sort(luma, axis=1, kind="stable"), 1024 // 100  # (radix: 2 us a row)
    spreads = (ranked[:, 1023 - trim].astype(np.int64) - ranked[:, trim]).tolist()
    return [Fingerprint(*found) for found in zip(_dct_hashes(luma), spreads, chromas, strict=True)]


def perceptual_hash(image: Pixels) -> int:
    """The build's near-duplicate hash of one decode (`Fingerprint.perceptual`)."""
    return fingerprint(image).perceptual


def hamming(a: int, b: int) -> int:
    """The number of bits in which two 64-bit hashes differ."""
    return (a ^ b).bit_count()


def is_nearly_uniform(image: Pixels) -> bool:
    """One colour, all black or white, a faint gradient: a `luma_spread` of at most
    `UNIFORM_SPREAD` levels. Its hash is noise; it is left out of the near-duplicate search."""
    return fingerprint(image).luma_spread <= UNIFORM_SPREAD


def is_grey(image: Pixels) -> bool:
    """A grey picture: a `chroma_spread` of at most `GREY_SPREAD` (False from a luma decode)."""
    chroma = fingerprint(image).chroma_spread
    return chroma is not None and chroma <= GREY_SPREAD


def odd_reasons(width: int, height: int, found: Fingerprint) -> tuple[str, ...]:
    """What is odd about an image stored at `width` x `height` whose small decode gave `found`:
    `nearly_uniform`, `tiny`, `extreme_aspect_ratio`, `grey` (whether grey is odd among the
    split's images is the report's call: it is where most are colour), in that order."""
    reasons = []
    if found.luma_spread <= UNIFORM_SPREAD:
        reasons.append(NEARLY_UNIFORM)
    if min(width, height) < TINY_SIDE:
        reasons.append(TINY)
    if max(width, height) > ASPECT_LIMIT * min(width, height):
        reasons.append(EXTREME_ASPECT_RATIO)
    if found.chroma_spread is not None and found.chroma_spread <= GREY_SPREAD:
        reasons.append(GREY)
    return tuple(reasons)
