"""Image bytes → validated 3-channel RGB JPEG bytes.

Every image is decoded once (every byte of its data, see `normalise_image`), so truncated and
corrupt files are caught at build time, not hours into training. A JPEG's data is decoded by
libjpeg-turbo through simplejpeg in strict mode (`jpegdata`): Pillow (like `tf.io.decode_jpeg`)
only warns when data is missing or damaged, and paints the rest of the image grey. The format is
sniffed from the bytes, never taken from the extension (ImageNet has PNG bytes named `.JPEG`). A
valid RGB JPEG that needs no resize is kept as the bytes that passed that check (its own, or a
copy without stray bytes the decoder skips); anything else (CMYK/YCCK, grayscale, palette,
alpha, 16-bit, PNG, GIF, ...) is converted to RGB and re-encoded.

EXIF orientation is not applied: pixels are stored as they are encoded, which is what
`tf.io.decode_jpeg` and the ImageNet/VOC annotation tools see, so boxes stay consistent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import re
import warnings

import numpy as np
from PIL import Image, JpegImagePlugin

from beam_pipeline.core.formats import sniff_format
from beam_pipeline.core.jpegdata import (
    UnsupportedConversion,
    at_scale,
    check_jpeg_data,
    scaled,
    strict_decode,
)
from beam_pipeline.core.quality.fingerprints import Fingerprint, Pixels, fingerprint, hash_scale
from beam_pipeline.core.rejections import InputError

ORIGINAL = "original"
SHORTER_SIDE = "shorter_side"
EXACT = "exact"
RESIZE_MODES = (ORIGINAL, SHORTER_SIDE, EXACT)

# Pillow's own default bound (about 89 Mpx, ~0.25 GiB as RGB): larger images are refused.
DEFAULT_MAX_PIXELS = 89_478_485
# The longest side libjpeg writes (JPEG_MAX_DIMENSION).
JPEG_MAX_SIDE = 65_500


@dataclasses.dataclass(frozen=True)
class ImagePolicy:
    """How images are stored.

    Attributes:
      mode: `original` (keep size), `shorter_side` (scale so the shorter side is `size[0]`,
        keeping the aspect ratio) or `exact` (scale to `size` = (height, width)).
      size: the target size for the resize modes.
      jpeg_quality: quality of re-encoded JPEGs.
      max_pixels: images with more pixels are refused as decompression bombs.
      keep_stray_jpeg_bytes: JPEGs whose scan ended before their data did are kept (without
        the stray bytes, with a note) instead of refused (`jpegdata`).
      fingerprints: give each image its `fingerprints.Fingerprint` (`--duplicates report`).
    """

    mode: str = ORIGINAL
    size: tuple[int, ...] = ()
    jpeg_quality: int = 95
    max_pixels: int = DEFAULT_MAX_PIXELS
    keep_stray_jpeg_bytes: bool = False
    fingerprints: bool = False

    def __post_init__(self):
        if self.mode not in RESIZE_MODES:
            raise ValueError(f"image policy must be one of {RESIZE_MODES}, not {self.mode!r}")
        expected = {ORIGINAL: 0, SHORTER_SIDE: 1, EXACT: 2}[self.mode]
        if len(self.size) != expected or any(s <= 0 for s in self.size):
            raise ValueError(f"image policy {self.mode!r} needs {expected} positive size value(s)")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"--jpeg_quality must be in [1, 100], not {self.jpeg_quality}")
        if any(s > JPEG_MAX_SIDE for s in self.size):
            raise ValueError(
                f"--image_size {'x'.join(map(str, self.size))}: a JPEG side holds at most "
                f"{JPEG_MAX_SIDE} pixels"
            )
        if self.max_pixels < 1:
            raise ValueError(f"--max_pixels must be at least 1, not {self.max_pixels}")

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) the image is stored at."""
        if self.mode == EXACT:
            return self.size[1], self.size[0]
        if self.mode == SHORTER_SIDE:
            scale = self.size[0] / min(width, height)
            return max(1, round(width * scale)), max(1, round(height * scale))
        return width, height


@dataclasses.dataclass(frozen=True)
class NormalisedImage:
    """An image ready for the record: RGB JPEG bytes and the stored geometry.

    `source_width`/`source_height` are the decoded size before any resize (what the annotation's
    coordinates refer to). `note`: what the build reports of a kept image (stray JPEG bytes
    taken out on `--keep_stray_jpeg_bytes`), or "". `print_source`: the decode the check or the
    conversion made, which `fingerprint` (`core.quality.fingerprints`) is made of when first
    asked for (None under `--duplicates off`).
    """

    data: bytes
    width: int
    height: int
    source_format: str
    source_width: int
    source_height: int
    reencoded: bool
    note: str = ""
    print_source: Pixels | None = dataclasses.field(default=None, repr=False, compare=False)

    @functools.cached_property
    def fingerprint(self) -> Fingerprint | None:
        """The stored pixels' `fingerprints.Fingerprint`, made once, when first asked for: the
        writer asks in runs (`stages.duplicates.PrintRuns`), not right after each decode."""
        return None if self.print_source is None else fingerprint(self.print_source)

    @functools.cached_property
    def sha256(self) -> str:
        """The hex SHA-256 of `data`: the record's `image/key/sha256`, and (its first 16
        bytes) the key of exact copies (`fingerprints.content_hash`), computed once."""
        return hashlib.sha256(self.data).hexdigest()


def normalise_image(data: bytes, policy: ImagePolicy) -> NormalisedImage:
    """Decodes, validates and (when needed) converts one image.

    A JPEG is decoded at the smallest DCT scale the output allows (1/8 when its bytes are kept
    as they are): libjpeg still reads and entropy-decodes every coefficient of the stream, which
    is where truncated and corrupt data are found, but skips the inverse DCT and colour
    conversion of pixels that would be thrown away (benchmarks/RESULTS.md, "The JPEG check",
    `68f8ce3`).

    Raises:
      InputError: `empty_file`, `not_an_image`, `decompression_bomb`, `truncated_image`,
        `corrupt_image`, `stray_jpeg_bytes` (`jpegdata`), `image_too_large` (the stored size
        is more than JPEG can hold or more than `max_pixels`), `unsupported_image`
        (floating-point pixels).
    """
    if not data:
        raise InputError("empty_file", "the file has 0 bytes")
    fmt = sniff_format(data)
    if fmt is None:
        raise InputError("not_an_image", f"unrecognised leading bytes {data[:8]!r}")
    keep_stray, note = policy.keep_stray_jpeg_bytes, ""
    with _decoding_errors(fmt, policy.max_pixels):
        image = source = _open(data, fmt, policy.max_pixels)
        _png_key(image, data, fmt)
        width, height = image.size
        target = policy.target_size(width, height)
        _check_storable(fmt, (width, height), target, policy)
        keep = fmt == "JPEG" and image.mode == "RGB" and target == (width, height)
        if keep:  # checked where the fingerprint is made: at `hash_scale`, in luma (colour
            # costs +13.5 us and its chroma twice as much: benchmarks/RESULTS.md, "Fingerprints")
            scale = hash_scale(*image.size) if policy.fingerprints else 8
            checked = check_jpeg_data(
                data, image.mode, image.size, keep_stray=keep_stray, scale=scale
            )
            data, note = checked.data, checked.note
        elif fmt == "JPEG" and image.mode in ("RGB", "L"):
            image, note = _decode_jpeg_strictly(data, image, target, keep_stray)
        else:
            if fmt == "JPEG":
                checked = check_jpeg_data(data, image.mode, image.size, keep_stray=keep_stray)
                note = checked.note
                if checked.data is not data:  # Pillow decodes the bytes that passed
                    image = Image.open(io.BytesIO(checked.data), formats=[fmt])
                image.draft(image.mode, target)
            image.load()
    if keep:
        kept = checked.pixels if policy.fingerprints else None
        return NormalisedImage(data, width, height, fmt, width, height, False, note, kept)
    rgb = to_rgb(image)
    if rgb.size != target:
        rgb = rgb.resize(target, Image.Resampling.BICUBIC, reducing_gap=3.0)
    out = io.BytesIO()
    try:
        sampling = _chroma_sampling(source)  # (of the file as opened: `image` may be its decode)
        rgb.save(out, format="JPEG", quality=policy.jpeg_quality, subsampling=sampling)
    except (OSError, ValueError) as error:  # the image's fault, never the output's
        raise InputError("corrupt_image", f"{fmt}: cannot be encoded as JPEG: {error}") from None
    printed = _print_source(image, rgb) if policy.fingerprints else None
    return NormalisedImage(out.getvalue(), *target, fmt, width, height, True, note, printed)


def _print_source(image: Image.Image, rgb: Image.Image) -> Image.Image:
    """What a converted image's print is made of: its RGB; a grey picture's grey pixels, the
    same print (R = G = B, of which Pillow's luma is the grey) at 290 us, not 690."""
    grey = image.mode == "L" and image.size == rgb.size and "transparency" not in image.info
    return image if grey else rgb


def _decode_jpeg_strictly(
    data: bytes, image: Image.Image, target: tuple[int, int], keep_stray: bool
) -> tuple[Image.Image, str]:
    """An RGB or grey JPEG (opened by Pillow) decoded once, by libjpeg-turbo in strict mode, at
    the DCT scale Pillow's `draft(mode, target)` picks: its data check and its pixels in one
    decode (Pillow's own decode after the check read the data twice: 27% more CPU for a
    `shorter_side` build: benchmarks/RESULTS.md, "The JPEG check", `54808df`). The same
    libjpeg-turbo settings as Pillow's (accurate integer IDCT, fancy upsampling) give the same
    pixels; where libjpeg-turbo picks
    another scale or cannot give the colour space, Pillow decodes the bytes that passed the
    check. Returns the image and the check's note."""
    width, height = image.size
    fits = min(width // target[0], height // target[1])
    scale = next((s for s in (8, 4, 2) if fits >= s), 1)
    size = scaled(image.size, scale)
    # libjpeg-turbo scales by any M/8: where another M rounds up to the same size (a 3x3 or
    # 5x5 image decoded to 2x2), it may take that one, so Pillow decodes those.
    ambiguous = any(
        (-(-width * m // 8), -(-height * m // 8)) == size for m in range(1, 9) if m * scale != 8
    )
    grey = image.mode == "L"
    checked = None
    if not ambiguous:
        with contextlib.suppress(UnsupportedConversion):
            space, scaling = "GRAY" if grey else "RGB", at_scale(image.size, scale)
            checked = strict_decode(data, space, keep_stray=keep_stray, **scaling)
    if checked is None or checked.pixels.shape[1::-1] != size:
        if checked is None:
            checked = check_jpeg_data(data, image.mode, image.size, keep_stray=keep_stray)
        if checked.data is not data:  # Pillow decodes the bytes that passed
            image = Image.open(io.BytesIO(checked.data), formats=["JPEG"])
        image.draft(image.mode, target)
        image.load()
        return image, checked.note
    pixels = checked.pixels
    decoded = Image.fromarray(pixels[:, :, 0] if grey else pixels, image.mode)
    decoded.info = dict(image.info)  # Pillow keeps a JPEG's comment when it saves the image
    return decoded, checked.note


def _check_storable(
    fmt: str, size: tuple[int, int], target: tuple[int, int], policy: ImagePolicy
) -> None:
    """Refuses an image whose stored size JPEG cannot hold (a side over 65,500 px: a 70000x2
    banner, or a 300x1 strip that `shorter_side 256` scales to 76800x256), or whose resize
    would make more than `max_pixels` (a memory bomb of the build's own making)."""
    width, height = target
    resized = f" (--image_policy {policy.mode} makes it {width}x{height})" if target != size else ""
    if max(width, height) > JPEG_MAX_SIDE:
        raise InputError(
            "image_too_large",
            f"{fmt} of {size[0]}x{size[1]}{resized}: JPEG holds at most {JPEG_MAX_SIDE} px a side",
        )
    if width * height > policy.max_pixels:
        raise InputError(
            "image_too_large",
            f"{fmt} of {size[0]}x{size[1]}{resized}: {width * height} pixels stored "
            f"(limit {policy.max_pixels}, --max_pixels)",
        )


# Pillow's modes of grey pictures.
_GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "F"})


def _chroma_sampling(image: Image.Image) -> int:
    """Pillow's `subsampling` for the JPEG an image is stored as when converted: a colour
    JPEG's own (4:2:0 for most photos: no finer chroma to keep; a phone's MPO too), Pillow's
    default (4:2:0) for a grey picture (its chroma is flat), full chroma (4:4:4) for every
    other, whose colours are whole. At 4:2:0 they were halved: palette images and drawings
    came out smeared, a mean error of 1.8 levels against 1.0 at quality 95 over the corpus's
    PNGs and GIFs, for 1.3x the bytes at 4:4:4 (found by a user trial)."""
    sampling = getattr(JpegImagePlugin, "get_sampling", None)  # (Pillow's, public, undocumented)
    if image.format in ("JPEG", "MPO") and image.mode == "RGB" and sampling is not None:
        try:
            found = sampling(image)
        except Exception:  # noqa: BLE001 - a header it cannot read (an SOF cut short: the
            return 2  # decode that follows rejects the file; a fuzz case raised IndexError)
        return found if found in (0, 1, 2) else 2
    return 2 if image.mode in _GREY_MODES else 0


def _png_key(image: Image.Image, data: bytes, fmt: str) -> None:
    """A PNG's colour key (tRNS) made to match the 8 bits Pillow reads its pixels at, or left
    out where it cannot. Pillow keeps the key's own value: a 2- or 4-bit grey one (1 of 4 bits,
    not 17) matched no pixel, and its keyed pixels were stored as they are, not onto white as
    libpng (TensorFlow's decoder) shows them (found by a loader review): scaled. A 16-bit RGB
    key cannot be matched against 8-bit pixels (one under 256 whitened the pixels whose top
    bits it equals; found by a fuzzer): not applied, its colours kept (`to_rgb`). IHDR, first,
    holds the bit depth (byte 24) and colour type (25: grey 0, RGB 2)."""
    key = image.info.get("transparency")
    if fmt != "PNG" or key is None or len(data) <= 25:
        return
    if image.mode == "L" and isinstance(key, int) and data[25] == 0 and data[24] in (2, 4):
        image.info["transparency"] = key * (255 // (2 ** data[24] - 1))
    elif data[25] == 2 and data[24] == 16:
        del image.info["transparency"]


def _open(data: bytes, fmt: str, max_pixels: int) -> Image.Image:
    """Reads the header only; refuses sizes that are empty or over `max_pixels`."""
    image = Image.open(io.BytesIO(data), formats=[fmt])
    width, height = image.size
    if width <= 0 or height <= 0:
        raise InputError("corrupt_image", f"{fmt} declares a size of {width}x{height}")
    if width * height > max_pixels:
        raise InputError(
            "decompression_bomb",
            f"{fmt} declares {width}x{height} = {width * height} pixels "
            f"(limit {max_pixels}, --max_pixels)",
        )
    return image


_BOMB_SIZE = re.compile(r"Image size \((\d+) pixels\)")


@contextlib.contextmanager
def _decoding_errors(fmt: str, max_pixels: int):
    """Turns Pillow's errors while opening or decoding into InputErrors with a reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            yield
    except InputError:
        raise
    except Image.DecompressionBombError as error:
        # Pillow's own text cites its hard limit (twice its default), not --max_pixels.
        found = _BOMB_SIZE.search(str(error))
        pixels = f"{int(found.group(1))} pixels" if found else "too many pixels"
        detail = f"{fmt} declares {pixels} (limit {max_pixels}, --max_pixels)"
        raise InputError("decompression_bomb", detail) from None
    except Image.UnidentifiedImageError:
        raise InputError("corrupt_image", f"{fmt} signature but Pillow cannot read it") from None
    except (OSError, SyntaxError, ValueError, EOFError) as error:
        message = str(error) or type(error).__name__
        lowered = message.lower()
        if "truncated" in lowered:
            reason = "truncated_image"
        elif "decompressed data too large" in lowered:
            reason = "decompression_bomb"
        else:
            reason = "corrupt_image"
        raise InputError(reason, f"{fmt}: {message}") from None


def to_rgb(image: Image.Image) -> Image.Image:
    """Converts any Pillow mode to 8-bit RGB; transparency (an alpha channel, or a tRNS colour
    key of any mode) is composited onto white.

    Raises:
      InputError: `unsupported_image` for floating-point pixels, or integer ones outside
        0-65535 (signed, or 32 bits), whose range is unknown.
    """
    mode = image.mode
    key = image.info.get("transparency")
    if isinstance(key, tuple) and max(key) > 255:
        # A 16-bit RGB PNG's key: Pillow reads its pixels as 8 bits, where several colours
        # share the key's top bits, so the key cannot be applied; its colours are kept.
        key = None
    if mode == "RGB" and key is None:
        return image
    if mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16-bit grey: keep the top 8 bits (Pillow's convert would clip, not scale).
        raw = np.asarray(image).astype(np.int64)
        if raw.size and (raw.min() < 0 or raw.max() > 65535):  # "I": 32 bits, or signed
            raise InputError(
                "unsupported_image",
                f"integer pixels from {raw.min()} to {raw.max()}, outside 0-65535 (signed, or "
                "32 bits), have no fixed range: store it as unsigned 8 or 16 bits",
            )
        grey = np.clip(raw >> 8, 0, 255).astype(np.uint8)
        if isinstance(key, int):
            grey[raw == key] = 255
        return Image.fromarray(grey, "L").convert("RGB")
    if mode == "F":
        raise InputError(
            "unsupported_image",
            "32-bit floating-point pixels have no fixed range: store it as 8 or 16 bits",
        )
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or key is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")
