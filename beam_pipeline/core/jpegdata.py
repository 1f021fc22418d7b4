"""A JPEG's data checked by libjpeg-turbo in strict mode, and the bytes that passed.

The one invariant: the bytes a build stores for a JPEG are bytes that libjpeg-turbo decoded in
strict mode to the end, without a single warning. Pillow, `tf.io.decode_jpeg` and DALI's CPU
decoder (all libjpeg-turbo or libjpeg underneath) then decode them in full too, and what they
show is what the check decoded: nothing is left for a reader to guess at.

Strict mode stops at libjpeg's first warning. Three warnings concern bytes the decoder skips,
with every coefficient of the data still decoded; for those the check mends a copy (the skipped
bytes taken out, which changes no pixel) and decodes that copy strictly again, so the rest of the
data is checked as well. The mended copy is what is stored:

- stray bytes between the header's marker segments (junk after an APP segment): taken out;
- a sequential JPEG's scan header with progressive fields set ("Invalid SOS parameters for
  sequential JPEG", which the decoder ignores): the fields set to what it uses;
- stray bytes after a scan's data, before the next marker ("N extraneous bytes before marker
  0xd9"): the decoder lost step in damaged data and finished its scan early, or (rarely) an
  encoder padded its data. On damaged real photos this is garbled far more often than not
  (`benchmarks/jpeg_damage.py`; benchmarks/RESULTS.md, "Damaged JPEGs", `63acc71`), so it is
  refused (`stray_jpeg_bytes`) unless the build is told `--keep_stray_jpeg_bytes`: then the stray
  bytes are taken out (the copy must show the very pixels Pillow shows of the file: which scan
  they follow is found by that), the rest is checked, and the image is kept with a note
  (reported).

Bytes after the end marker, which no decoder reads (a phone's Motion Photo video), are not
stored either, where the data does not end with an end marker (`_through_end`: a second image
after the first, MPF's, is kept).

Everything else libjpeg warns about (data that ends early, bad Huffman codes, stray bytes before
a restart marker, whose interval libjpeg skipped) is refused: the picture is grey or garbled.
So is a file whose scans do not send every coefficient of every component to its last bit
(`_unsent`): cut at a scan's end and closed with EOI, it decodes without a warning, a
progressive one blurred.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re

import numpy as np
import simplejpeg
from PIL import Image

from beam_pipeline.core.rejections import InputError

_STRAY_BYTES = re.compile(r"(\d+) extraneous bytes before marker 0x([0-9a-f]{2})", re.IGNORECASE)
_NOT_SEQUENTIAL = "invalid sos parameters for sequential jpeg"
_SHORT_SEGMENT = "premature end of data segment"
_RESTART_MARKERS = range(0xD0, 0xD8)
_SOS, _EOI, _SOI = 0xDA, 0xD9, 0xD8
_SEQUENTIAL_FRAMES = (0xC0, 0xC1, 0xC9)  # baseline, extended Huffman, extended arithmetic
_PROGRESSIVE_FRAMES = (0xC2, 0xC6, 0xCA, 0xCE)
_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn (not DHT, JPG, DAC)
# Each mend takes out one warning; a file that needs more than this is no photo's damage.
_MAX_MENDS = 64
KEEP_FLAG = "--keep_stray_jpeg_bytes"
# The reasons of a refused image, and of a kept one (reported: rejected.jsonl, is_image false).
STRAY_JPEG_BYTES = "stray_jpeg_bytes"
KEPT_STRAY_JPEG_BYTES = "stray_jpeg_bytes_kept"


@dataclasses.dataclass(frozen=True)
class CheckedJpeg:
    """A JPEG whose data libjpeg-turbo decoded strictly to the end.

    Attributes:
      data: the bytes that passed (the input, or a mended copy of it): what is stored.
      pixels: the decode, at the scale and in the colour space asked.
      note: what a person must know of a mend (stray bytes kept), or "".
    """

    data: bytes
    pixels: np.ndarray
    note: str = ""


class UnsupportedConversion(Exception):
    """libjpeg-turbo cannot give this JPEG's data in the colour space asked for."""


def strict_decode(
    data: bytes, colorspace: str, *, keep_stray: bool = False, **scaling
) -> CheckedJpeg:
    """Decodes `data` strictly (simplejpeg) at `scaling`, mending what is harmless (module doc).

    Raises:
      InputError: `truncated_image` (the file ends before its data), `stray_jpeg_bytes` (a scan
        ended early; not with `keep_stray`), `corrupt_image` (anything else libjpeg warns of).
      UnsupportedConversion: `colorspace` is not one libjpeg-turbo gives this data in.
    """
    checked, note = data, ""
    for _ in range(_MAX_MENDS):
        try:
            pixels = simplejpeg.decode_jpeg(checked, colorspace=colorspace, strict=True, **scaling)
        except ValueError as error:
            message = str(error).strip()
        else:
            unsent = _unsent(checked)
            if unsent is not None:
                raise InputError(
                    "truncated_image",
                    f"JPEG: its scans end before its data does ({unsent}): the file was cut "
                    "short at a scan's end and closed (decoded anyway, blurred or without a "
                    "colour)",
                )
            return CheckedJpeg(_through_end(checked), pixels, note)
        if "unsupported color conversion" in message.lower():
            raise UnsupportedConversion(message)
        mended = _mend(checked, message, keep_stray, colorspace, scaling)
        if mended is None:
            raise _refusal(message)
        checked, mend_note = mended
        note = note or mend_note
    raise InputError("corrupt_image", f"JPEG: more than {_MAX_MENDS} runs of stray bytes")


def _through_end(data: bytes) -> bytes:
    """`data` up to its end marker (EOI): what follows (a phone's Motion Photo video, 3 MB of
    it; padding) is no part of the picture, and was stored with it. Data that ends with an
    end marker (nearly every JPEG; one with a second image after it, MPF's, too) is as it is,
    without a walk of its scans."""
    if data.endswith(b"\xff\xd9"):
        return data
    scans = _scans(data)
    if not scans or scans[-1][2] != _EOI:
        return data
    end = scans[-1][1]
    while data[end] == 0xFF:  # (fill bytes before the marker)
        end += 1
    return data[: end + 1]


def _mend(
    data: bytes, message: str, keep_stray: bool, colorspace: str, scaling: dict
) -> tuple[bytes, str] | None:
    """(a copy of `data` without the fault `message` names, a note for the report), or None
    where the fault is damage.

    Raises:
      InputError: `stray_jpeg_bytes`, for stray bytes after a scan's data without `keep_stray`.
    """
    stray = _STRAY_BYTES.search(message)
    if stray:
        count, marker = int(stray.group(1)), int(stray.group(2), 16)
        if marker in _RESTART_MARKERS:
            return None  # libjpeg skipped the data up to the restart marker: grey from there
        header_mended = _without_header_strays(data)
        if header_mended is not None:
            return header_mended, ""
        if not keep_stray:
            raise InputError(
                STRAY_JPEG_BYTES,
                f"JPEG: {message}: its scan ended early, so the decoder lost step in its data "
                f"(garbled from there in most damaged photos); {KEEP_FLAG} keeps such images, "
                "listed as reported",
            )
        mended = _without_scan_strays(data, count, marker, colorspace, scaling)
        note = f"JPEG: {message}; kept ({KEEP_FLAG}) without them, may be garbled"
        return None if mended is None else (mended, note)
    if _NOT_SEQUENTIAL in message.lower():
        mended = _sequential_scan_fields(data)
        return None if mended is None else (mended, "")
    return None


def _refusal(message: str) -> InputError:
    lowered = message.lower()
    reason = "truncated_image" if "premature end of jpeg file" in lowered else "corrupt_image"
    return InputError(
        reason, f"JPEG: {message} (decoded anyway, it is grey or garbled from there on)"
    )


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(position of a marker's 0xFF, marker, end of its segment) for the markers of `data` before
    its first scan's data; a scan's header is the last one. Stray bytes are skipped. (A list
    built in one loop, no generator: every JPEG a build keeps is walked, `_unsent`;
    benchmarks/RESULTS.md, "The JPEG check".)"""
    found: list[tuple[int, int, int]] = []
    position, size = 2, len(data)
    while position < size:
        start = position if data[position] == 0xFF else data.find(b"\xff", position)
        if start < 0:
            break
        marker_at = start
        while marker_at + 1 < size and data[marker_at + 1] == 0xFF:
            marker_at += 1  # fill bytes
        if marker_at + 3 >= size:
            break
        marker = data[marker_at + 1]
        if marker in _RESTART_MARKERS or marker in (_EOI, 0x00, 0x01, _SOI):
            break  # not a header any more
        end = marker_at + 2 + ((data[marker_at + 2] << 8) | data[marker_at + 3])
        found.append((start, marker, end))
        if marker == _SOS:
            break
        position = end
    return found


def _without_header_strays(data: bytes) -> bytes | None:
    """`data` without the stray bytes between its marker segments before the first scan
    (where libjpeg expects a marker and finds other bytes), or None when there are none. The
    segments are walked by their lengths, so a thumbnail inside APP1 is not looked into."""
    kept, position, found = [data[:2]], 2, False
    for start, marker, end in _segments(data):
        if start > position:
            found = True  # stray bytes: dropped
        if marker == _SOS:
            return b"".join([*kept, data[start:]]) if found else None
        kept.append(data[start:end])
        position = end
    return None


def _frame_marker(data: bytes) -> int | None:
    """The SOFn marker of `data`'s frame, or None."""
    return next((marker for _, marker, _end in _segments(data) if marker in _FRAMES), None)


def _sequential_scan_fields(data: bytes) -> bytes | None:
    """A sequential JPEG with each scan header's spectral and approximation fields set to what
    a sequential decoder uses (0, 63, 0, 0), or None when there is nothing to set."""
    if _frame_marker(data) not in _SEQUENTIAL_FRAMES:
        return None
    out, changed = bytearray(data), False
    for data_start, _, _ in _scans(data):
        fields = slice(data_start - 3, data_start)  # Ss, Se, Ah/Al: a scan header's last bytes
        if bytes(out[fields]) != b"\x00\x3f\x00":
            out[fields] = b"\x00\x3f\x00"
            changed = True
    return bytes(out) if changed else None


def _scans(data: bytes) -> list[tuple[int, int, int]]:
    """(start of a scan's data, position of the 0xFF of the marker that ends it, that marker)
    for each scan of `data`, in order. Segments are walked by their lengths (a thumbnail's
    scan inside APP1 is not one of the image's)."""
    return [scan[:3] for scan in _scans_with_headers(data)]


def _scans_with_headers(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """`_scans`, each with its header's fields (after the length: Ns, the components, Ss, Se,
    Ah/Al)."""
    position = next((start for start, m, _ in _segments(data) if m == _SOS), -1)
    scans: list[tuple[int, int, int, bytes]] = []
    while 0 <= position < len(data):
        marker_at = data.find(b"\xff", position)
        if marker_at < 0:
            break
        while marker_at + 1 < len(data) and data[marker_at + 1] == 0xFF:
            marker_at += 1  # fill bytes
        if marker_at + 3 >= len(data) or data[marker_at + 1] == _EOI:
            break
        length = int.from_bytes(data[marker_at + 2 : marker_at + 4], "big")
        if length < 2:
            break
        position = marker_at + 2 + length
        if data[marker_at + 1] == _SOS:
            end, marker = _data_end(data, position)
            if end < 0:
                break
            scans.append((position, end, marker, data[marker_at + 4 : position]))
            position = end
    return scans


def _fields(data: bytes, start: int, end: int) -> bytes:
    """What follows the length of the marker segment whose 0xFF is at `start` (fill bytes may
    follow it) and that ends at `end`."""
    while data[start + 1] == 0xFF:
        start += 1
    return data[start + 4 : end]


def _unsent(data: bytes) -> str | None:
    """What of the frame's coefficients no scan of `data` sends at full precision (a
    component, or a progressive component's coefficients and the lowest bit they reach), or
    None when every one is sent. libjpeg decodes a file cut at a scan's end and closed with
    EOI without a warning: a progressive one blurred, or a component of a non-interleaved
    sequential one left out. One header walk where the first scan holds every component of
    a sequential frame (nearly every JPEG); every scan's header otherwise."""
    segments = _segments(data)
    frame = next((segment for segment in segments if segment[1] in _FRAMES), None)
    if frame is None or segments[-1][1] != _SOS:
        return None  # (libjpeg refused such a file already)
    marker, fields = frame[1], _fields(data, frame[0], frame[2])
    first_scan = _fields(data, segments[-1][0], segments[-1][2])
    if len(fields) < 6:
        return None
    components = [fields[6 + 3 * i] for i in range(fields[5]) if 8 + 3 * i < len(fields)]
    progressive = marker in _PROGRESSIVE_FRAMES
    if not progressive and set(components) <= set(first_scan[1 : 1 + 2 * first_scan[0] : 2]):
        return None
    # The lowest bit each component's coefficients reach: 64 means never sent.
    reached = {component: [64] * 64 for component in components}
    for _, _, _, header in _scans_with_headers(data):
        count = header[0] if header else 0
        if len(header) < 4 + 2 * count:
            continue
        first, last, low = (
            (header[-3], header[-2], header[-1] & 0x0F) if progressive else (0, 63, 0)
        )
        for component in header[1 : 1 + 2 * count : 2]:
            bits = reached.get(component)
            if bits is None:
                continue  # (libjpeg refused a scan of a component the frame lacks)
            for k in range(first, min(last, 63) + 1):
                bits[k] = min(bits[k], low)
    for component, bits in reached.items():
        short = [k for k in range(64) if bits[k]]
        if short and not progressive:
            return f"component {component} is in no scan"
        if short:
            levels = sorted({bits[k] for k in short}, reverse=True)
            said = [
                f"{_ranges([k for k in short if bits[k] == level])} "
                + ("never sent" if level == 64 else f"sent to bit {level} only")
                for level in levels
            ]
            return f"component {component}'s coefficients {', '.join(said)}"
    return None


def _ranges(numbers: list[int]) -> str:
    """Sorted integers as runs: "1-5, 9"."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _data_end(data: bytes, position: int) -> tuple[int, int]:
    """(position of the first 0xFF of the marker that ends the entropy-coded data from
    `position` (stuffed 0xFF00 and restart markers belong to it), that marker), or (-1, -1)."""
    while True:
        start = data.find(b"\xff", position)
        if start < 0:
            return -1, -1
        after = start + 1
        while after < len(data) and data[after] == 0xFF:
            after += 1
        if after >= len(data):
            return -1, -1
        if data[after] == 0x00 or data[after] in _RESTART_MARKERS:
            position = after + 1
            continue
        return start, data[after]


def _without_scan_strays(
    data: bytes, count: int, marker: int, colorspace: str, scaling: dict
) -> bytes | None:
    """`data` without the `count` stray bytes libjpeg skipped before `marker` after a scan's
    data, or None when no scan fits. The scan they follow is the first whose copy without them
    decodes to the very pixels a reader shows of `data` (taken from a scan that needed them,
    the bytes leave it short: other pixels, and for Huffman data "premature end of data
    segment"; arithmetic-coded data runs short without a warning)."""
    shown = _lenient_pixels(data)
    if shown is None:
        return None
    for start, end, ends_with in _scans(data):
        if ends_with != marker or end - start < count:
            continue
        mended = data[: end - count] + data[end:]
        try:
            simplejpeg.decode_jpeg(mended, colorspace=colorspace, strict=True, **scaling)
        except ValueError as error:
            if _SHORT_SEGMENT in str(error).lower():
                continue  # not this scan's bytes
        pixels = _lenient_pixels(mended)
        if pixels is not None and np.array_equal(pixels, shown):
            return mended
    return None


def _lenient_pixels(data: bytes) -> np.ndarray | None:
    """What Pillow (libjpeg-turbo, warnings ignored) shows of a JPEG, or None."""
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as image:
            return np.asarray(image)
    except (OSError, SyntaxError, ValueError):
        return None


def scaled(size: tuple[int, int], scale: int) -> tuple[int, int]:
    """(width, height) decoded at 1/`scale`, rounded up as libjpeg and Pillow's draft do."""
    return -(-size[0] // scale), -(-size[1] // scale)


def at_scale(size: tuple[int, int], scale: int) -> dict[str, int]:
    """simplejpeg's arguments for a decode at 1/`scale`: `min_factor` alone only bounds the
    factor that `min_width` and `min_height` pick, and without them it decodes in full."""
    width, height = scaled(size, scale)
    return {"min_factor": scale, "min_width": width, "min_height": height}


def check_jpeg_data(
    data: bytes,
    mode: str,
    size: tuple[int, int],
    *,
    keep_stray: bool = False,
    scale: int = 8,
    colour: bool = False,
) -> CheckedJpeg:
    """Decodes every coefficient of a JPEG's data (at 1/`scale`, one channel where it can and
    `colour` is not asked: no pixel work beyond that) strictly, as `strict_decode`. `size` is
    the image's (width, height): simplejpeg scales down only to a size it is given. (The
    build asks for the RGB decode its fingerprints are made of: `fingerprints.hash_scale`.)

    Raises:
      InputError: as `strict_decode`; `corrupt_image` when libjpeg-turbo cannot decode the
        data in any colour space.
    """
    # libjpeg-turbo turns CMYK and YCCK into CMYK only, and some colour spaces into RGB only.
    scaling = at_scale(size, scale)
    if mode != "CMYK":
        for space in ("RGB", "GRAY") if colour else ("GRAY",):
            with contextlib.suppress(UnsupportedConversion):
                return strict_decode(data, space, keep_stray=keep_stray, **scaling)
    try:
        space = "CMYK" if mode == "CMYK" else "RGB"
        return strict_decode(data, space, keep_stray=keep_stray, **scaling)
    except UnsupportedConversion as error:
        raise InputError(
            "corrupt_image", f"JPEG: {error} (decoded anyway, it is grey or garbled from there on)"
        ) from None
