"""TFRecord framing: write and read records with masked CRC32C checks, for both halves (the
builder writes and verifies shards with it, the DALI loader indexes them).

Each record is `uint64 length | uint32 masked_crc(length) | data | uint32 masked_crc(data)`,
all little-endian. CRC32C comes from `google-crc32c` (a C extension); Beam's own TFRecord sink
goes through `crcmod`, which silently falls back to pure Python, orders of magnitude slower.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Protocol

import google_crc32c

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


class Readable(Protocol):
    """What records are read from: a binary file, or a wrapper of one with its `read`."""

    def read(self, size: int, /) -> bytes: ...


class CorruptRecordError(Exception):
    """A TFRecord file whose framing or checksums are wrong."""

    def __init__(self, offset: int, index: int, problem: str):
        super().__init__(f"record {index} at byte {offset}: {problem}")
        self.offset = offset
        self.index = index
        self.problem = problem


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encode_record(data: bytes) -> bytes:
    """One framed record."""
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))


def read_records(stream: Readable) -> Iterator[bytes]:
    """Yields each record's data; raises CorruptRecordError at the first bad frame."""
    for _, _, data in read_frames(stream):
        yield data


def read_frames(stream: Readable) -> Iterator[tuple[int, int, bytes]]:
    """Yields (offset, framed size, data) of each record, its length and data checked against
    their masked CRC32Cs; raises CorruptRecordError at the first bad frame (its `problem`
    starts with "truncated" where the file ends inside a record)."""
    offset, index = 0, 0
    while True:
        header = stream.read(12)
        if not header:
            return
        if len(header) < 12:
            raise CorruptRecordError(offset, index, "truncated length header")
        length_bytes, (length_crc,) = header[:8], _CRC.unpack(header[8:])
        if masked_crc(length_bytes) != length_crc:
            first = " at the file's start (is it a TFRecord file?)" if offset == 0 else ""
            raise CorruptRecordError(offset, index, "length checksum mismatch" + first)
        (length,) = _LENGTH.unpack(length_bytes)
        body = stream.read(length + 4)
        if len(body) < length + 4:
            raise CorruptRecordError(offset, index, "truncated record data")
        data, (data_crc,) = body[:length], _CRC.unpack(body[length:])
        if masked_crc(data) != data_crc:
            raise CorruptRecordError(offset, index, "data checksum mismatch")
        yield offset, 12 + length + 4, data
        offset += 12 + length + 4
        index += 1
