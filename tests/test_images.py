import dataclasses
import io
import re
import struct

import numpy as np
import pytest
import simplejpeg
from helpers import CORPUS, jpeg_bytes, png_bytes, png_file
from PIL import Image

from beam_pipeline.core import jpegdata
from beam_pipeline.core.images import ImagePolicy, normalise_image, sniff_format
from beam_pipeline.core.quality import fingerprints
from beam_pipeline.core.rejections import InputError

PILLOW = CORPUS / "images" / "pillow"
KEEP = ImagePolicy()
PRINTS = ImagePolicy(fingerprints=True)


def pixels(data: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    assert image.format == "JPEG" and image.mode == "RGB"
    return np.asarray(image).astype(int)


def test_valid_rgb_jpeg_keeps_its_original_bytes():
    data = (PILLOW / "hopper.jpg").read_bytes()
    result = normalise_image(data, KEEP)
    assert result.data is data and not result.reencoded
    assert (result.width, result.height) == (128, 128)


def test_progressive_jpeg_is_kept():
    data = (PILLOW / "app13-multiple.jpg").read_bytes()
    result = normalise_image(data, KEEP)
    assert result.data is data and (result.width, result.height) == (256, 160)


def test_png_named_jpeg_is_sniffed_and_converted():
    path = CORPUS / "ilsvrc_named_copies/Data/CLS-LOC/train/n02105855/n02105855_2933.JPEG"
    data = path.read_bytes()
    assert sniff_format(data) == "PNG"
    result = normalise_image(data, KEEP)
    assert result.reencoded and result.source_format == "PNG"
    original = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert np.abs(pixels(result.data) - original).mean() < 3


def test_cmyk_jpeg_becomes_rgb_matching_its_rgb_twin():
    result = normalise_image((PILLOW / "pil_sample_cmyk.jpg").read_bytes(), KEEP)
    twin = np.asarray(Image.open(PILLOW / "pil_sample_rgb.jpg")).astype(int)
    assert result.reencoded
    assert np.abs(pixels(result.data) - twin).mean() < 8


@pytest.mark.parametrize(
    "name", ["hopper_gray.jpg", "hopper.gif", "p_trns_single.png", "1_trns.png", "l_trns.png"]
)
def test_other_modes_become_three_channel_rgb(name):
    path = PILLOW / name
    result = normalise_image(path.read_bytes(), KEEP)
    source = Image.open(path)
    assert result.reencoded
    assert pixels(result.data).shape == (source.size[1], source.size[0], 3)


def test_grayscale_stays_grey():
    result = normalise_image((PILLOW / "hopper_gray.jpg").read_bytes(), KEEP)
    rgb = pixels(result.data)
    grey = np.asarray(Image.open(PILLOW / "hopper_gray.jpg")).astype(int)
    assert np.abs(rgb[..., 0] - grey).mean() < 3
    assert np.abs(rgb[..., 0] - rgb[..., 2]).max() <= 2


def test_alpha_is_composited_on_white():
    image = Image.new("RGBA", (16, 16), (255, 0, 0, 0))  # fully transparent red
    image.paste((0, 0, 255, 255), (0, 0, 8, 16))  # opaque blue left half
    out = io.BytesIO()
    image.save(out, format="PNG")
    rgb = pixels(normalise_image(out.getvalue(), KEEP).data)
    assert np.abs(rgb[8, 2] - [0, 0, 255]).max() < 20
    assert np.abs(rgb[8, 13] - [255, 255, 255]).max() < 20


@pytest.mark.parametrize("name", ["l_trns.png", "p_trns_single.png", "rgb_trns.png", "i_trns.png"])
def test_a_transparent_colour_key_is_composited_on_white_in_every_mode(name):
    # A tRNS chunk makes one grey level, palette entry or RGB colour transparent.
    source = Image.open(PILLOW / name)
    if source.mode == "I;16":
        raw = np.asarray(source).astype(int)
        transparent = raw == source.info["transparency"]
        opaque = np.repeat((raw >> 8)[..., None], 3, axis=2)
    else:
        rgba = np.asarray(source.convert("RGBA")).astype(int)
        transparent, opaque = rgba[..., 3] == 0, rgba[..., :3]
    assert 0 < transparent.sum() < transparent.size
    rgb = pixels(normalise_image((PILLOW / name).read_bytes(), KEEP).data)
    assert rgb[transparent].mean() > 250  # white, not the key colour (or black)
    assert np.abs(rgb[~transparent] - opaque[~transparent]).mean() < 8  # JPEG's ringing


def test_a_sixteen_bit_rgb_colour_key_is_not_applied_to_eight_bit_pixels():
    # Pillow reads 16-bit RGB as 8 bits but keeps the 16-bit key: matching it against the
    # 8-bit pixels whitened a colour that was not the key. The colours are kept.
    colours = [(0x1234, 0x5678, 0x9ABC), (0x3412, 0x7856, 0xBC9A)] * 4
    rows = b"".join(b"\x00" + b"".join(struct.pack(">HHH", *c) for c in colours) for _ in range(8))
    png = png_file(8, 8, 16, 2, rows, struct.pack(">HHH", *colours[0]))
    rgb = pixels(normalise_image(png, KEEP).data)
    expected = np.array([[c >> 8 for c in colour] for colour in colours[:8]])
    assert np.abs(rgb - expected[None]).mean() < 8  # no pixel turned white
    # A key under 256 in every channel (a fuzzer's): the pixels whose top bits equal it
    # turned white, the keyed one stayed dark. Not applied either.
    raw = b"\x00" + struct.pack(">6H", 0x1020, 0x3040, 0x5060, 0x0010, 0x0030, 0x0050)
    dark = png_file(2, 1, 16, 2, raw, struct.pack(">3H", 16, 48, 80))
    stored = pixels(normalise_image(dark, KEEP).data)
    assert np.abs(stored[0] - np.array([[16, 48, 80], [0, 0, 0]])).max() < 6


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_a_low_bit_grey_colour_key_is_composited_as_libpng_shows_it(bits):
    # Pillow reads 2- and 4-bit grey as 8 bits but kept the key's own value (1 of 4 bits, not
    # 17): no pixel matched it, and the keyed pixels were stored grey where TensorFlow's
    # decoder (libpng) shows them transparent.
    values = np.random.default_rng(bits).integers(0, 2**bits, (4, 16))
    values[0, 0] = 1  # (the key, and the key's 8-bit value: dark, far from white)
    rows = b""
    for row in values:
        text = "".join(format(int(v), f"0{bits}b") for v in row)
        rows += b"\x00" + int(text, 2).to_bytes(len(text) // 8, "big")
    png = png_file(16, 4, bits, 0, rows, struct.pack(">H", 1))
    rgb = pixels(normalise_image(png, KEEP).data)
    assert rgb[values == 1].mean() > 245  # composited onto white
    grey = values * (255 // (2**bits - 1))
    assert np.abs(rgb[values != 1] - grey[values != 1][:, None]).mean() < 8


def test_floating_point_pixels_are_refused_not_guessed():
    # A float TIFF in 0..1 was clipped to 0..255 and stored black.
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8), 0.5, np.float32), "F").save(out, format="TIFF")
    with pytest.raises(InputError) as error:
        normalise_image(out.getvalue(), KEEP)
    assert (error.value.reason, error.value.detail) == (
        "unsupported_image",
        "32-bit floating-point pixels have no fixed range: store it as 8 or 16 bits",
    )


def test_integer_pixels_outside_16_bits_are_refused_and_16_bit_ones_scaled():
    # A 32-bit integer TIFF (Pillow's mode I) was read as 16 bits and clipped: a third of its
    # pixels stored 0 and most others 255, exit 0.
    def tiff(values):
        out = io.BytesIO()
        Image.fromarray(values.reshape(8, 8).astype(np.int32), "I").save(out, format="TIFF")
        return out.getvalue()

    with pytest.raises(InputError) as error:
        normalise_image(tiff(np.linspace(-5e5, 1e6, 64)), KEEP)
    assert (error.value.reason, error.value.detail) == (
        "unsupported_image",
        "integer pixels from -500000 to 1000000, outside 0-65535 (signed, or 32 bits), have no "
        "fixed range: store it as unsigned 8 or 16 bits",
    )
    within = np.arange(64) * 1000  # 0..63000: 16-bit values, scaled to their top 8 bits
    stored = pixels(normalise_image(tiff(within), KEEP).data)
    assert np.abs(stored[:, :, 0].astype(int) - (within.reshape(8, 8) >> 8)).max() <= 3


def test_sizes_jpeg_cannot_hold_are_refused_as_the_images_fault():
    # 70000x2: a valid PNG, but JPEG holds 65,500 px a side (the encoder raised OSError, which
    # the writer took for a fault of the output directory and failed the build).
    out = io.BytesIO()
    Image.new("RGB", (70000, 2), (100, 100, 100)).save(out, format="PNG")
    with pytest.raises(InputError) as error:
        normalise_image(out.getvalue(), KEEP)
    assert (error.value.reason, error.value.detail) == (
        "image_too_large",
        "PNG of 70000x2: JPEG holds at most 65500 px a side",
    )
    # A 300x1 strip that shorter_side 256 would scale to 76800x256.
    with pytest.raises(InputError) as error:
        normalise_image(jpeg_bytes(300, 1), ImagePolicy("shorter_side", (256,)))
    assert error.value.detail == (
        "JPEG of 300x1 (--image_policy shorter_side makes it 76800x256): JPEG holds at most "
        "65500 px a side"
    )
    # One scaled past --max_pixels: a memory bomb of the resize's own making.
    with pytest.raises(InputError) as error:
        normalise_image(jpeg_bytes(40, 10), ImagePolicy("shorter_side", (100,), max_pixels=30000))
    assert error.value.detail == (
        "JPEG of 40x10 (--image_policy shorter_side makes it 400x100): 40000 pixels stored "
        "(limit 30000, --max_pixels)"
    )


def test_a_bomb_past_pillows_own_limit_cites_max_pixels():
    # Pillow raises by itself past twice its limit, citing that figure: the detail cites ours.
    with pytest.raises(InputError) as error:
        normalise_image(pillow_bytes("decompression_bomb.gif"), ImagePolicy(max_pixels=1000))
    assert error.value.reason == "decompression_bomb"
    assert error.value.detail.endswith("(limit 1000, --max_pixels)"), error.value.detail


def pillow_bytes(name):
    return (PILLOW / name).read_bytes()


def test_sixteen_bit_grey_is_scaled_not_clipped():
    array = np.full((8, 8), 32768, np.uint16)  # mid-grey in 16 bits
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    rgb = pixels(normalise_image(out.getvalue(), KEEP).data)
    assert np.abs(rgb - 128).max() <= 2


def test_one_by_one_image():
    result = normalise_image((PILLOW / "jfif_unit_cm.jpg").read_bytes(), KEEP)
    assert (result.width, result.height) == (1, 1)


def test_exif_orientation_is_not_applied():
    # 2x1 stored pixels with Orientation=8: kept as stored, 2 wide and 1 high.
    result = normalise_image((PILLOW / "orientation_rectangle.jpg").read_bytes(), KEEP)
    assert (result.width, result.height) == (2, 1)


@pytest.mark.parametrize(
    "name, reason",
    [
        ("truncated_jpeg.jpg", "truncated_image"),
        ("truncated_image.png", "truncated_image"),
        ("truncated_end_chunk.png", "truncated_image"),
        ("broken_data_stream.png", "corrupt_image"),
        ("broken.png", "corrupt_image"),
        ("zero_width.gif", "corrupt_image"),
        ("decompression_bomb.gif", "decompression_bomb"),
        ("png_decompression_dos.png", "decompression_bomb"),
    ],
)
def test_bad_images_are_rejected_with_a_reason(name, reason):
    with pytest.raises(InputError) as error:
        normalise_image((PILLOW / name).read_bytes(), KEEP)
    assert error.value.reason == reason
    assert "0x" not in error.value.detail  # no object addresses: dead letters are deterministic


def test_empty_and_non_image_files():
    with pytest.raises(InputError, match="empty_file"):
        normalise_image(b"", KEEP)
    with pytest.raises(InputError, match="not_an_image"):
        normalise_image(b"this is a text file named .JPEG", KEEP)
    # "BM" starts a BMP, and text: a BMP's info header must follow.
    with pytest.raises(InputError, match="not_an_image"):
        normalise_image(b"BMW service record: 2019-03-02, 41,000 km\n", KEEP)
    bmp = io.BytesIO()
    Image.new("RGB", (3, 2), (0, 128, 255)).save(bmp, format="BMP")
    assert normalise_image(bmp.getvalue(), KEEP).source_format == "BMP"


def test_max_pixels_refuses_large_images_before_decoding():
    with pytest.raises(InputError) as error:
        normalise_image(jpeg_bytes(100, 100), ImagePolicy(max_pixels=9999))
    assert error.value.reason == "decompression_bomb"


def test_shorter_side_resize_keeps_aspect_ratio():
    result = normalise_image(jpeg_bytes(200, 100), ImagePolicy("shorter_side", (50,)))
    assert (result.width, result.height) == (100, 50)
    assert (result.source_width, result.source_height) == (200, 100)
    assert pixels(result.data).shape == (50, 100, 3)


def test_exact_resize_and_quality():
    result = normalise_image(jpeg_bytes(200, 100), ImagePolicy("exact", (32, 48), jpeg_quality=80))
    assert pixels(result.data).shape == (32, 48, 3)
    assert result.reencoded


def test_resize_that_changes_nothing_keeps_bytes():
    data = jpeg_bytes(80, 60)
    assert normalise_image(data, ImagePolicy("shorter_side", (60,))).data is data


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "zoom"},
        {"mode": "exact", "size": (3,)},
        {"size": (5,)},
        {"mode": "shorter_side", "size": (0,)},
        {"jpeg_quality": 0},
    ],
)
def test_invalid_policies(kwargs):
    with pytest.raises(ValueError):
        ImagePolicy(**kwargs)


def _full_decode_verdict(data: bytes) -> str:
    """What a full-resolution RGB decode says of the bytes: "ok" or an error (Pillow's, or
    libjpeg-turbo's strict one, which also refuses data it would paint grey)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
        jpegdata.strict_decode(data, "RGB")
    except InputError as error:
        return error.reason
    except (OSError, SyntaxError, ValueError) as error:
        message = str(error).lower()
        cut = "truncated" in message or "premature end of jpeg file" in message
        return "truncated_image" if cut else "corrupt_image"
    return "ok"


def _damaged_variants(data: bytes):
    for fraction in (0.3, 0.6, 0.9, 0.98):
        yield f"cut at {fraction}", data[: int(len(data) * fraction)]
    for fraction in (0.3, 0.6, 0.9):
        at = int(len(data) * fraction)
        for junk in (b"\x00\x00\x00\x00", b"\xff\xc4\x00\x02", b"\xff\xd9", b"\xff\xff\xff\xff"):
            yield f"{junk.hex()} at {fraction}", data[:at] + junk + data[at + len(junk) :]


@pytest.mark.parametrize("policy", [KEEP, ImagePolicy("shorter_side", (32,))])
@pytest.mark.parametrize("name", ["pil_sample_rgb.jpg", "app13-multiple.jpg", "hopper.jpg"])
def test_scaled_validation_decode_rejects_what_a_full_decode_rejects(name, policy):
    """Kept JPEGs are decoded at 1/8 scale, resized ones once at the scale their resize starts
    from; the verdict on damaged bytes must not change."""
    verdicts = []
    for label, damaged in _damaged_variants((PILLOW / name).read_bytes()):
        expected = _full_decode_verdict(damaged)
        try:
            normalise_image(damaged, policy)
            got = "ok"
        except InputError as error:
            got = error.reason
        assert got == expected, label
        verdicts.append(got)
    assert verdicts.count("truncated_image") >= 4  # every cut is caught


def _pillow_draft_reencode(data: bytes, policy: ImagePolicy, subsampling: int) -> bytes:
    """What the build stored before it decoded resized JPEGs itself: Pillow's `draft` decode,
    RGB, the resize, quality 95 (at the source's chroma subsampling, which the build keeps)."""
    with Image.open(io.BytesIO(data)) as image:
        target = policy.target_size(*image.size)
        image.draft(image.mode, target)
        rgb = image.convert("RGB")
    if rgb.size != target:
        rgb = rgb.resize(target, Image.Resampling.BICUBIC, reducing_gap=3.0)
    out = io.BytesIO()
    rgb.save(out, format="JPEG", quality=policy.jpeg_quality, subsampling=subsampling)
    return out.getvalue()


@pytest.mark.parametrize("side", [8, 16, 40, 64, 90, 200])  # DCT scales 1/8 ... 1/1
@pytest.mark.parametrize("name", ["hopper.jpg", "hopper_gray.jpg", "pil_sample_rgb.jpg"])
def test_a_resized_jpeg_is_decoded_once_to_pillows_pixels(name, side):
    # The strict decode that checks a resized JPEG's data also gives its pixels, at the scale
    # Pillow's draft picks and with its settings: the stored bytes are the same as from
    # Pillow's own decode.
    data = (PILLOW / name).read_bytes()
    policy = ImagePolicy("shorter_side", (side,))
    subsampling = 0 if name == "pil_sample_rgb.jpg" else 2  # (the sources'; grey: Pillow's)
    assert normalise_image(data, policy).data == _pillow_draft_reencode(data, policy, subsampling)


TO_ONE_PIXEL = [ImagePolicy("shorter_side", (1,)), ImagePolicy("exact", (1, 1))]


@pytest.mark.parametrize("policy", [KEEP, ImagePolicy("shorter_side", (32,))])
def test_damage_behind_stray_bytes_or_a_restart_marker_is_rejected(policy):
    # libjpeg reports lost data in a JPEG with restart markers as stray bytes before the next
    # one (the rest of that interval grey), and strict mode stopped at a header's stray bytes
    # without reading on: both were kept as they were.
    out = io.BytesIO()
    Image.open(PILLOW / "hopper.jpg").save(out, "JPEG", quality=95, restart_marker_rows=1)
    data = out.getvalue()
    assert normalise_image(data, KEEP).data is data
    half = len(data) // 2
    with pytest.raises(InputError) as error:
        normalise_image(data[:half] + bytes(512) + data[half + 512 :], policy)
    assert error.value.reason == "corrupt_image"
    assert re.search(r"extraneous bytes before marker 0xd[0-7]", error.value.detail)
    with pytest.raises(InputError) as error:  # a real file: garbled stripes
        normalise_image((PILLOW / "hopper_bad_exif.jpg").read_bytes(), policy)
    assert error.value.detail.startswith("JPEG: Corrupt JPEG data: 1214 extraneous bytes")
    junk = (PILLOW / "junk_jpeg_header.jpg").read_bytes()  # 5 stray bytes in its header
    if policy == KEEP:  # stored without them: every reader decodes it without a warning
        stored = normalise_image(junk, KEEP)
        assert len(stored.data) == len(junk) - 5 and not stored.note
        with Image.open(io.BytesIO(junk)) as image:
            assert np.array_equal(simplejpeg.decode_jpeg(stored.data, strict=True), image)
    with pytest.raises(InputError) as error:
        normalise_image(junk[: len(junk) * 6 // 10], policy)
    assert error.value.reason == "truncated_image"
    half = len(junk) // 2
    with pytest.raises(InputError) as error:
        normalise_image(junk[:half] + bytes(4096) + junk[half + 4096 :], policy)
    assert error.value.reason == "corrupt_image"


@pytest.mark.parametrize("side", [3, 5])
@pytest.mark.parametrize("policy", TO_ONE_PIXEL)
def test_a_tiny_jpeg_whose_scale_libjpeg_could_pick_otherwise_gets_pillows_pixels(side, policy):
    # 3x3 and 5x5 decoded to 2x2: libjpeg-turbo's 5/8 or 3/8 give that size too, and it took
    # them, where Pillow decodes at 1/2 or 1/4.
    noise = np.random.default_rng(side).integers(0, 256, (side, side, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(noise).save(out, "JPEG")
    data = out.getvalue()
    assert normalise_image(data, policy).data == _pillow_draft_reencode(data, policy, 2)


def test_the_data_check_of_a_kept_jpeg_decodes_at_the_hash_scale(monkeypatch):
    # simplejpeg scales down only to a size it is given (min_factor alone decodes in full).
    decoded = []
    real = jpegdata.simplejpeg.decode_jpeg

    def spy(data, *args, **kwargs):
        pixels = real(data, *args, **kwargs)
        decoded.append(pixels.shape)
        return pixels

    monkeypatch.setattr(jpegdata.simplejpeg, "decode_jpeg", spy)
    data = jpeg_bytes(640, 427)
    kept = normalise_image(data, KEEP)
    assert kept.data is data and kept.fingerprint is None
    assert decoded == [(54, 80, 1)]  # ceil(427 / 8) x ceil(640 / 8), one channel
    decoded.clear()
    # With fingerprints (--duplicates report), the same decode gives the fingerprint.
    kept = normalise_image(data, PRINTS)
    assert decoded == [(54, 80, 1)]
    luma = real(data, min_factor=8, min_width=80, min_height=54, colorspace="GRAY")
    assert kept.fingerprint == fingerprints.fingerprint(luma)
    decoded.clear()
    small = jpeg_bytes(200, 120)  # shorter side 120: 1/2 keeps 60 px, 1/4 only 30
    normalise_image(small, PRINTS)
    assert decoded == [(60, 100, 1)]  # at the hash scale, where 1/8 would suffice unhashed
    decoded.clear()
    normalise_image(data, ImagePolicy("shorter_side", (100,)))
    assert decoded == [(107, 160, 3)]  # 1/4: Pillow's draft scale for 150 x 100


def test_a_resized_jpeg_with_stray_bytes_before_its_end_is_refused_or_kept_on_the_flag():
    data = (PILLOW / "hopper.jpg").read_bytes()
    stray = data[:-2] + b"\x00\x00\xff\xd9"
    policy = ImagePolicy("shorter_side", (40,))
    with pytest.raises(InputError) as error:
        normalise_image(stray, policy)
    assert error.value.reason == "stray_jpeg_bytes"
    kept = normalise_image(stray, ImagePolicy("shorter_side", (40,), keep_stray_jpeg_bytes=True))
    assert kept.data == _pillow_draft_reencode(data, policy, 2)
    assert kept.note.startswith("JPEG: Corrupt JPEG data: 1 extraneous bytes before marker 0xd9")


def test_jpeg_data_that_libjpeg_paints_grey_is_rejected():
    # Pillow (and tf.io.decode_jpeg) decode these with a warning only, grey or garbled from the
    # damage on: they were kept as they were, exit 0, verify OK.
    # (Flipped bits that still decode as valid codes cannot be told: JPEG has no checksum.)
    data = (PILLOW / "hopper.jpg").read_bytes()
    half = len(data) // 2
    damaged = {
        "cut, its end marker put back": data[:half] + b"\xff\xd9",
        "512 bytes zeroed": data[:half] + bytes(512) + data[half + 512 :],
    }
    for label, bad in damaged.items():
        with Image.open(io.BytesIO(bad)) as image:
            image.load()  # no error: Pillow keeps what it could decode
        with pytest.raises(InputError) as error:
            normalise_image(bad, KEEP)
        assert error.value.reason == "corrupt_image", label
        assert error.value.detail.startswith("JPEG: Corrupt JPEG data"), label
        with pytest.raises(InputError):  # converted images are checked too
            normalise_image(bad, ImagePolicy(mode="shorter_side", size=(32,)))
    # Stray bytes before the end marker: the decoder finished the scan early. Refused (on
    # damaged photos nearly always garbled, benchmarks/jpeg_damage.py), or on the flag kept
    # without them, with a note: every reader then decodes it without a warning. (libjpeg
    # counts 1 of the 2: its bit buffer had read the other, which stays, unread.)
    stray = data[:-2] + b"\x00\x00\xff\xd9"
    with pytest.raises(InputError) as error:
        normalise_image(stray, KEEP)
    assert error.value.reason == "stray_jpeg_bytes"
    assert error.value.detail == (
        "JPEG: Corrupt JPEG data: 1 extraneous bytes before marker 0xd9: its scan ended early, "
        "so the decoder lost step in its data (garbled from there in most damaged photos); "
        "--keep_stray_jpeg_bytes keeps such images, listed as reported"
    )
    kept = normalise_image(stray, ImagePolicy(keep_stray_jpeg_bytes=True))
    assert kept.data == data[:-2] + b"\x00\xff\xd9" and not kept.reencoded
    simplejpeg.decode_jpeg(kept.data, strict=True)
    assert kept.note == (
        "JPEG: Corrupt JPEG data: 1 extraneous bytes before marker 0xd9; kept "
        "(--keep_stray_jpeg_bytes) without them, may be garbled"
    )


def test_every_stored_image_has_the_fingerprint_of_its_pixels():
    # Kept, converted and resized: each carries the fingerprint of what the record stores, near
    # (within the build's radius) the fingerprint of the stored bytes decoded in full.
    data = jpeg_bytes(640, 427)
    policies = (PRINTS, ImagePolicy("shorter_side", (200,)), ImagePolicy("exact", (96, 96)))
    for policy in (dataclasses.replace(policy, fingerprints=True) for policy in policies):
        for source in (data, png_bytes(300, 200)):
            stored = normalise_image(source, policy)
            full = fingerprints.fingerprint(Image.open(io.BytesIO(stored.data)).convert("RGB"))
            assert stored.fingerprint is not None
            distance = fingerprints.hamming(stored.fingerprint.perceptual, full.perceptual)
            assert distance <= fingerprints.DEFAULT_RADIUS, (policy, distance)


def test_a_grey_picture_s_print_is_its_stored_rgb_s():
    # Printed from its grey pixels (the cheaper way), the same as from the RGB it stores.
    rng = np.random.default_rng(5)
    grey = Image.fromarray(rng.integers(0, 256, (90, 120), dtype=np.uint8), "L")
    for fmt in ("JPEG", "PNG"):
        out = io.BytesIO()
        grey.save(out, fmt)
        stored = normalise_image(out.getvalue(), PRINTS)
        assert stored.reencoded and stored.fingerprint is not None
        decoded = Image.open(io.BytesIO(out.getvalue()))
        assert stored.fingerprint == fingerprints.fingerprint(decoded.convert("RGB"))
        assert stored.fingerprint.chroma_spread == 0


def test_a_converted_image_keeps_its_source_s_chroma():
    # Pillow's default 4:2:0 smeared palette images; a colour JPEG (an MPO too) keeps its own.
    from PIL import JpegImagePlugin

    pixels = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    frame, png, mpo = Image.fromarray(pixels), io.BytesIO(), io.BytesIO()
    frame.save(png, "PNG")
    frame.save(mpo, "MPO", save_all=True, append_images=[frame], quality=90)
    policy = ImagePolicy("shorter_side", (32,))
    for data, sampling in ((png.getvalue(), 0), (mpo.getvalue(), 2)):
        stored = normalise_image(data, policy)
        with Image.open(io.BytesIO(stored.data)) as image:
            assert JpegImagePlugin.get_sampling(image) == sampling
