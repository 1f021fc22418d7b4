"""Small builders of test trees and readers of built output, shared by the tests."""

from __future__ import annotations

import io
import json
import os
import pathlib
import struct
import zlib

import numpy as np
from PIL import Image

from beam_pipeline import pipeline
from beam_pipeline.tools import sample_tree
from schemas import BUILD_INFO_FILE, DEAD_LETTER_FILE, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example
from schemas.tfrecord import read_records

CORPUS = pathlib.Path(__file__).parent / "data" / "corpus"


def jpeg_bytes(width=64, height=48, colour=(200, 30, 30), mode="RGB", quality=92) -> bytes:
    """A solid-colour image with a gradient, so decoded pixels can be checked roughly."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[:] = colour
    pixels[:, :, 2] = np.linspace(0, 255, width).astype(np.uint8)[None, :]
    image = Image.fromarray(pixels, "RGB")
    if mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def png_bytes(width=32, height=32, mode="RGB") -> bytes:
    image = Image.new(mode, (width, height))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def png_file(
    width: int, height: int, bits: int, colour_type: int, rows: bytes, key: bytes | None = None
) -> bytes:
    """A PNG made chunk by chunk (IHDR, a tRNS of `key`'s bytes when given, IDAT of `rows`,
    each with its filter byte, IEND): bit depths and keys Pillow does not write."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, bits, colour_type, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            chunk(b"IHDR", header),
            *([chunk(b"tRNS", key)] if key is not None else []),
            chunk(b"IDAT", zlib.compress(rows)),
            chunk(b"IEND", b""),
        ]
    )


def write(path: pathlib.Path, data: bytes | str) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


PHOTOS = CORPUS / "images" / "tfrecorder"


def six_photos(root: pathlib.Path) -> pathlib.Path:
    """The six corpus photos in class folders: four in train/ (a, b in cat; c, d in goat) and
    two in val/ (e in cat, f in goat), for the trees that plant copies of them."""
    for source, target in (
        ("TEST/cat/cat-800x600-3.jpg", "train/cat/a.jpg"),
        ("TRAIN/cat/cat-640x853-1.jpg", "train/cat/b.jpg"),
        ("TEST/goat/goat-640x427-3.jpg", "train/goat/c.jpg"),
        ("TRAIN/goat/goat-640x640-1.jpg", "train/goat/d.jpg"),
        ("VALIDATION/cat/cat-800x600-2.jpg", "val/cat/e.jpg"),
        ("VALIDATION/goat/goat-320x320-2.jpg", "val/goat/f.jpg"),
    ):
        write(root / target, (PHOTOS / source).read_bytes())
    return root


def two_photos(root: pathlib.Path) -> pathlib.Path:
    """The corpus's training photo of each class in a class folder: no copies, nothing odd."""
    for name in ("cat", "goat"):
        for number, path in enumerate(sorted((PHOTOS / "TRAIN" / name).glob("*.jpg"))):
            write(root / name / f"{number}.jpg", path.read_bytes())
    return root


def ilsvrc_image(
    root: pathlib.Path,
    split: str,
    stem: str,
    data: bytes,
    xml: str | None = None,
    task: str = "DET",
) -> None:
    """Writes ROOT/Data/<task>/<split>/<stem>.JPEG and, when given, its XML."""
    write(root / "Data" / task / split / f"{stem}.JPEG", data)
    if xml is not None:
        write(root / "Annotations" / task / split / f"{stem}.xml", xml)


def build(input_dir, output_dir, *args) -> DatasetInfo:
    """Runs a DirectRunner build in this process and returns its DatasetInfo."""
    argv = ["--input_dir", str(input_dir), "--output_dir", str(output_dir), *map(str, args)]
    return pipeline.run(argv)


def build_sample(tmp_path_factory, num_train, num_val, seed, num_shards) -> pathlib.Path:
    """Builds a learnable sample tree once (for module fixtures); returns the output directory."""
    tree = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(tree), num_train=num_train, num_val=num_val, seed=seed)
    out = tmp_path_factory.mktemp("out")
    build(tree, out, "--num_shards", num_shards)
    return out


def _values(feature):
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def read_split(output_dir, split: str) -> list[dict]:
    """Every example of a split in written order (shard by shard), as plain Python values."""
    info = DatasetInfo.from_json((pathlib.Path(output_dir) / BUILD_INFO_FILE).read_text())
    examples = []
    for shard in info.splits[split].shards:
        with open(os.path.join(output_dir, shard.file), "rb") as stream:
            for record in read_records(stream):
                example = Example.FromString(record)
                values = {key: _values(f) for key, f in example.features.feature.items()}
                values["_shard"] = shard.file
                examples.append(values)
    return examples


def decode(example: dict) -> np.ndarray:
    """The stored image of an example as an HxWx3 uint8 array."""
    image = Image.open(io.BytesIO(example[F.ENCODED][0]))
    assert image.format == "JPEG"
    return np.asarray(image)


def dead_letters(output_dir) -> list[dict]:
    text = (pathlib.Path(output_dir) / DEAD_LETTER_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def failure_line(stderr: str) -> str:
    """The `BUILD FAILED:` line of a failed build's console, checking the lines around it.

    A failed build's console ends with exactly that line, then, when a build is in the
    output, what is left of it (`the complete build in <out> is kept as it was`...), then
    `full log: <path>` of a log that exists and holds the traceback; no traceback reaches the
    console.
    """
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    noted = len(lines) > 2 and lines[-3].startswith("BUILD FAILED:")
    failed = lines[-3] if noted else lines[-2]
    assert [line for line in lines if line.startswith("BUILD FAILED:")] == [failed], stderr
    assert lines[-1].startswith("full log: "), stderr
    log = pathlib.Path(lines[-1][len("full log: ") :])
    assert "Traceback (most recent call last)" in log.read_text(encoding="utf-8")
    return failed


def summary_rows(stdout: str) -> list[str]:
    """The rows of a finished build's summary table (below the rule under its header)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"})
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line.strip())
    return rows


def interrupted_build(monkeypatch, shards: int, argv: list[str]) -> list:
    """Runs the build command `argv` in this process (`--direct_running_mode in_memory`), as
    Ctrl-C stops it once `shards` shards are written (it exits 130); returns what the writer
    returned of each (ShardResult, rejections, prints)."""
    from beam_pipeline.stages import writing
    from beam_pipeline.tools import build as build_tool

    written, write = [], writing._WriteShardFn._write

    def _write(self, *args):
        if len(written) == shards:
            raise KeyboardInterrupt
        written.append(write(self, *args))
        return written[-1]

    with monkeypatch.context() as patch:
        patch.setattr(writing._WriteShardFn, "_write", _write)
        assert build_tool.main(argv) == 130
    return written


class Seed(tuple):
    """A module fixture's (seed build's directory, what the tests read of it), shown as its
    directory in Hypothesis' reports (the records or metadata whole ran to pages)."""

    def __repr__(self) -> str:
        return f"Seed({self[0]})"
