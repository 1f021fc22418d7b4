"""Index elements cross a stage boundary packed: many encoded elements, compressed, in one value.

A local build's coordinator (FnApiRunner) relays every byte that leaves one stage for another,
in one process, at ~10 ns a byte: the one part of a build that does not grow with the workers.
The index entries of one bundle repeat themselves (path heads, class names, box sizes), so
zlib's fastest level shrinks a bundle's worth 3-5x, at ~1-2 us an entry on the workers, which
do grow. `Pack` buffers a bundle's elements (up to FLUSH_BYTES, encoded) and emits them as one
compressed `bytes`; the DoFn that reads them after the boundary calls `unpack_elements`. That
reader must be the DoFn whose side inputs force the boundary: an unpacking step of its own,
having none, would be fused before the boundary and the entries would cross unpacked. Batches
that are grouped (the pairing and shard batches) are packed by their makers with `compress`
or `pack`.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import apache_beam as beam
from apache_beam import coders
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

# A packed value's size before compression; one bundle may emit several.
FLUSH_BYTES = 16 << 20
# zlib's fastest level: level 6 shrinks index entries ~10% more at three times the CPU.
LEVEL = 1
# Each zlib call costs ~5 us whatever its size: a smaller value is sent as it is.
MIN_COMPRESSED_BYTES = 1024
_RAW, _ZLIB = b"\x00", b"\x01"
_ITEMS = coders.ListCoder(coders.BytesCoder())


def compress(data: bytes) -> bytes:
    """`data` zlib-compressed, or as it is when it is too small to gain; one byte says which."""
    if len(data) < MIN_COMPRESSED_BYTES:
        return _RAW + data
    return _ZLIB + zlib.compress(data, LEVEL)


def decompress(value: bytes) -> bytes:
    if value[:1] == _ZLIB:
        return zlib.decompress(value[1:])
    if value[:1] == _RAW:
        return value[1:]
    raise ValueError(f"not a packed value: it starts with {value[:1]!r}")


def pack(items: list[bytes]) -> bytes:
    """Encoded items → one compressed value."""
    return compress(_ITEMS.encode(items))


def unpack(packed: bytes) -> list[bytes]:
    return _ITEMS.decode(decompress(packed))


def in_global_window(value) -> WindowedValue:
    """`value` as a DoFn's `finish_bundle` must emit it: the index's elements are all in the
    global window."""
    return WindowedValue(value, MIN_TIMESTAMP, (GlobalWindow(),))


def unpack_elements(packed: bytes, coder: coders.Coder) -> Iterable:
    """The elements of a value `Pack(coder)` emitted."""
    return map(coder.decode, unpack(packed))


class _PackFn(beam.DoFn):
    def __init__(self, coder: coders.Coder):
        self._coder = coder

    def start_bundle(self):
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def process(self, element):
        encoded = self._coder.encode(element)
        self._pending.append(encoded)
        self._pending_bytes += len(encoded)
        if self._pending_bytes >= FLUSH_BYTES:
            yield self._flush()

    def finish_bundle(self):
        if self._pending:
            yield in_global_window(self._flush())

    def _flush(self) -> bytes:
        packed = pack(self._pending)
        self._pending = []
        self._pending_bytes = 0
        return packed


class Pack(beam.PTransform):
    """Elements (in the global window, as the index's are) → a few compressed `bytes` per
    bundle; read them back with `unpack_elements(value, coder)`."""

    def __init__(self, coder: coders.Coder):
        super().__init__()
        self._coder = coder

    def expand(self, elements):
        return elements | "Pack" >> beam.ParDo(_PackFn(self._coder)).with_output_types(bytes)
