"""Fingerprints for duplicates, near duplicates and odd images (`core/quality/fingerprints.py`).

Exact values where the result is exact: the hashes of a fixed synthetic picture (ImageHash's
own where it is installed). On the real photos of the corpus: every planted copy (re-encoded,
resized, cropped by a few pixels) within the radius, mirror images and different photos
outside it, and the hash of the small decode the build makes within the radius of the full
decode's. The search among hashes: `test_hash_search.py`.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import pathlib

import numpy as np
import pytest
from PIL import Image

from beam_pipeline.core.quality import fingerprints as fp

CORPUS = pathlib.Path(__file__).resolve().parent / "data" / "corpus" / "images"
PHOTOS = sorted(CORPUS.glob("tfrecorder/*/*/*.jpg"))  # six real photos, 320x213 to 800x600
RADIUS = fp.DEFAULT_RADIUS


def synthetic_picture() -> np.ndarray:
    """128x96 RGB: a sine pattern in red, a vertical ramp in green, a disc in blue."""
    y, x = np.mgrid[0:96, 0:128].astype(np.float64)
    red = 128 + 100 * np.sin(x / 9.0) * np.cos(y / 13.0)
    green = 255 * y / 95
    blue = np.where((x - 40) ** 2 + (y - 50) ** 2 < 900, 230.0, 20.0)
    return np.rint(np.stack([red, green, blue], axis=2)).astype(np.uint8)


# Computed once, and equal to ImageHash 4.3.2's `str(imagehash.dhash(im))` and `phash`.
SYNTHETIC_DHASH = 0x9319C4E4E4919393
SYNTHETIC_PHASH = 0xC8073878346BC67F


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def small_decode(data: bytes) -> Image.Image:
    """The decode the build hashes: a JPEG at `hash_scale` (Pillow's draft, as libjpeg-turbo
    scales it for the build's check)."""
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    scale = fp.hash_scale(width, height)
    image.draft(image.mode, (width // scale, height // scale))
    image.load()
    assert image.size == (-(-width // scale), -(-height // scale))
    return image


def build_hash(data: bytes) -> int:
    return fp.perceptual_hash(small_decode(data))


@pytest.fixture(scope="module")
def photos() -> list[tuple[str, bytes, Image.Image]]:
    found = []
    for path in PHOTOS:
        data = path.read_bytes()
        found.append((path.name, data, Image.open(io.BytesIO(data)).convert("RGB")))
    return found


def test_content_hash_is_the_stored_bytes_sha256_cut_to_16_bytes():
    data = jpeg(Image.fromarray(synthetic_picture()))
    digest = fp.content_hash(data)
    assert digest == hashlib.sha256(data).digest()[:16]
    assert digest.hex() == hashlib.sha256(data).hexdigest()[:32]  # image/key/sha256's prefix
    assert fp.content_hash(data + b"\0") != digest


def test_the_hashes_of_a_fixed_picture_are_known():
    pixels = synthetic_picture()
    picture = Image.fromarray(pixels)
    assert fp.dhash(picture) == SYNTHETIC_DHASH
    assert fp.phash(picture) == SYNTHETIC_PHASH
    # The build's hash (a bilinear thumbnail) gives the same bits here.
    assert fp.perceptual_hash(picture) == SYNTHETIC_PHASH
    # Arrays, RGB or luma, hash as the pictures they hold.
    luma = np.asarray(picture.convert("L"))
    for pixels_given in (pixels, luma, luma[:, :, None]):
        assert fp.dhash(pixels_given) == SYNTHETIC_DHASH
        assert fp.phash(pixels_given) == SYNTHETIC_PHASH
        assert fp.perceptual_hash(pixels_given) == SYNTHETIC_PHASH


def test_the_hashes_equal_imagehash():
    imagehash = pytest.importorskip("imagehash")
    pictures = [Image.fromarray(synthetic_picture())]
    for path in [*PHOTOS, CORPUS / "pillow/hopper.jpg", CORPUS / "pillow/transparent.png"]:
        image = Image.open(path)
        pictures += [image, image.convert("L"), image.resize((77, 51)), image.rotate(30)]
    for picture in pictures:
        assert fp.dhash(picture) == int(str(imagehash.dhash(picture)), 16)
        assert fp.phash(picture) == int(str(imagehash.phash(picture)), 16)
    assert int(str(imagehash.dhash(pictures[0])), 16) == SYNTHETIC_DHASH
    assert int(str(imagehash.phash(pictures[0])), 16) == SYNTHETIC_PHASH


def test_pixels_must_be_8_bit_with_one_or_three_channels():
    for bad in (np.zeros((8, 8), np.uint16), np.zeros((8, 8, 4), np.uint8), np.zeros(8, np.uint8)):
        with pytest.raises(ValueError, match="pixels must"):
            fp.fingerprint(bad)


def test_hash_scale_keeps_32_pixels_on_the_shorter_side():
    assert fp.hash_scale(500, 375) == 8  # 63x47
    assert fp.hash_scale(500, 256) == 8  # 63x32
    assert fp.hash_scale(500, 249) == 8  # 63x32 (sizes round up)
    assert fp.hash_scale(500, 248) == 4  # 1/8 would give 31
    assert fp.hash_scale(128, 128) == 4
    assert fp.hash_scale(100, 100) == 2
    assert fp.hash_scale(40, 300) == 1
    assert fp.hash_scale(20, 20) == 1


def test_the_small_decode_hashes_as_the_full_decode(photos):
    for name, data, _image in photos:
        full = Image.open(io.BytesIO(data))
        small = small_decode(data)
        assert small.width < full.width, name
        distance = fp.hamming(fp.perceptual_hash(full), fp.perceptual_hash(small))
        assert distance <= RADIUS, name


def planted_copies(image: Image.Image, crops: tuple[int, ...]) -> dict[str, bytes]:
    width, height = image.size
    copies = {f"quality {q}": jpeg(image, q) for q in (50, 60, 70, 80, 90, 95)}
    for factor in (0.5, 0.25):
        size = (round(width * factor), round(height * factor))
        copies[f"resized {factor}x"] = jpeg(image.resize(size, Image.Resampling.BICUBIC))
    for px in crops:
        copies[f"cropped {px} px"] = jpeg(image.crop((px, px, width - px, height - px)))
        copies[f"cropped {px} px left"] = jpeg(image.crop((px, 0, width, height)))
    return copies


def test_planted_copies_are_within_the_radius(photos):
    for name, data, image in photos:
        # A 213 px photo cropped by 8 px on every side lost 7% of it: 8 bits (the benchmark).
        crops = (2, 4, 8) if min(image.size) >= 400 else (2, 4)
        own = build_hash(data)
        for variant, copy in planted_copies(image, crops).items():
            assert fp.hamming(own, build_hash(copy)) <= RADIUS, (name, variant)


def test_mirror_images_and_different_photos_are_outside_the_radius(photos):
    hashes = {name: build_hash(data) for name, data, _ in photos}
    for name, _data, image in photos:
        mirrored = build_hash(jpeg(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)))
        assert fp.hamming(hashes[name], mirrored) > 2 * RADIUS, name
    for (a, ha), (b, hb) in itertools.combinations(hashes.items(), 2):
        assert fp.hamming(ha, hb) > 2 * RADIUS, (a, b)


def test_hamming_counts_differing_bits():
    assert fp.hamming(0, 0) == 0
    assert fp.hamming(0, 2**64 - 1) == 64
    assert fp.hamming(0b1011, 0b0110) == 3


def test_nearly_uniform_pictures_are_flagged(photos):
    rng = np.random.default_rng(0)
    for colour in ((0, 0, 0), (255, 255, 255), (128, 128, 128), (200, 30, 30)):
        flat = np.clip(np.add(colour, rng.normal(0, 2, (120, 160, 3))), 0, 255)
        decoded = small_decode(jpeg(Image.fromarray(flat.astype(np.uint8))))
        assert fp.is_nearly_uniform(decoded), colour
        assert fp.NEARLY_UNIFORM in fp.odd_reasons(160, 120, fp.fingerprint(decoded))
    faint_ramp = np.tile(np.linspace(100, 106, 160), (120, 1)).astype(np.uint8)
    assert fp.is_nearly_uniform(faint_ramp)
    for name, data, _ in photos:
        assert not fp.is_nearly_uniform(small_decode(data)), name
        assert (
            fp.odd_reasons(*Image.open(io.BytesIO(data)).size, fp.fingerprint(small_decode(data)))
            == ()
        )


def test_odd_sizes_and_grey_pictures():
    colour = Image.fromarray(synthetic_picture())
    found = fp.fingerprint(colour)
    assert fp.odd_reasons(128, 96, found) == ()
    assert fp.odd_reasons(31, 200, found) == (fp.TINY, fp.EXTREME_ASPECT_RATIO)
    assert fp.odd_reasons(301, 100, found) == (fp.EXTREME_ASPECT_RATIO,)
    assert fp.odd_reasons(300, 100, found) == ()
    grey = colour.convert("L")
    assert fp.is_grey(grey) and fp.is_grey(grey.convert("RGB"))
    assert fp.is_grey(small_decode(jpeg(grey.convert("RGB"), 50)))
    assert not fp.is_grey(colour) and not fp.is_grey(small_decode(jpeg(colour, 50)))
    # A luma decode says nothing of a file's colours.
    luma = np.asarray(grey)
    assert fp.fingerprint(luma).chroma_spread is None and not fp.is_grey(luma)
    assert fp.GREY not in fp.odd_reasons(128, 96, fp.fingerprint(luma))
