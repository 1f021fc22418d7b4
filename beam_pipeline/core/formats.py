"""Image formats told by their leading bytes, as Pillow names them (nothing decoded)."""

from __future__ import annotations

from schemas import NoBuildError as NoBuildError  # re-exported: what read_build_info raises

# Leading bytes of the image formats a tree may hold, with Pillow's names.
MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)


_BMP_HEADERS = frozenset({12, 16, 40, 52, 56, 64, 108, 124})  # the DIB header sizes there are


def sniff_format(data: bytes) -> str | None:
    """The image format named by the file's leading bytes (Pillow's name), or None."""
    for magic, name in MAGIC:
        if data.startswith(magic):
            # "BM" alone starts many text files: a BMP's info header follows with its size.
            if name == "BMP" and int.from_bytes(data[14:18], "little") not in _BMP_HEADERS:
                return None
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None
