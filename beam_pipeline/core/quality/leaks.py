"""Which training image a held-out image copies: the search behind `--duplicates drop_leaks`.

The writers of the training split hand their prints (`duplicates.ImagePrint`, one batch per
shard) to a combiner that keeps them in columns (`Chunk`: ~70 bytes a print, ImageNet's 1.28M
training images ~90 MB); the writers of the other splits get the combined `TrainingCopies` as
a side input and ask it of each image they are about to store. The answer is the one the
report would give (`duplicates`): the same content hash is an exact copy (nearly uniform
images too); a perceptual hash within the radius of a training image that is not nearly
uniform is a near copy. Each block of the hash is sorted once; a question looks up its
image's value of every block (multi-index hashing, as the report's search) and compares the
training hashes found there: ~2,500 hashes a block at 1.28M, where the search is built in 0.9 s
and answers in ~100 us an image (ImageNet's 50,000 validation images: 5 s of CPU).
The training image named is the one the answer does not depend on the runner for: the exact
copy of the smallest file name, else the nearest, then the smallest file name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from beam_pipeline.core.quality import fingerprints as fp
from beam_pipeline.core.quality import hash_search as hs
from beam_pipeline.core.quality.duplicates import EXACT, NEAR, ImagePrint

BLOCKS = fp.DEFAULT_RADIUS + 1
_CONTENT = fp.CONTENT_HASH_BYTES


# How a dropped copy's `rejected.jsonl` detail says that it and its original have different
# classes: a clash that `duplicates.jsonl` cannot show (the dropped image is in no group).
CLASH = "a clash"
_POLICY = "; --duplicates drop_leaks"


class Copy(NamedTuple):
    """The training image a held-out image copies: its file name, EXACT or NEAR, the bits
    between their perceptual hashes (0 for an exact copy), and each label of the training
    copies found (its exact copies; else every one within the radius: the pairs the report
    would show of the image) with the copy of that label `copy_of` would name."""

    original: str
    kind: str
    distance: int
    labelled: tuple[tuple[int, str], ...] = ()

    def detail(self, label: int = -1, names: Sequence[str] = ()) -> str:
        """The `rejected.jsonl` detail of the held-out image (of `label`) dropped for it; with
        the classes' `names`, one that says a clash where a copy is labelled otherwise, and
        names that copy."""
        how = "exact copy" if self.kind == EXACT else f"near copy, {self.distance} bits apart"
        said = f"a copy of the training image {self.original} ({how})"
        other = [(n, copy) for n, copy in self.labelled if n >= 0 and n != label]
        if label >= 0 and other and names:
            for n, copy in other:
                said += f"{'' if copy == self.original else f' and of {copy}'}, labelled "
                said += f"{names[n]} there"
            said += f" and {names[label]} here: {CLASH}"
        return f"{said}{_POLICY}"


def _first_of_each_label(found: Iterable[tuple[tuple, str, int]]) -> tuple[tuple[int, str], ...]:
    """(label, name) of the first copy of each label among (rank, name, label)."""
    first: dict[int, tuple] = {}
    for rank, name, label in found:
        first[label] = min(first.get(label, (rank, name)), (rank, name))
    return tuple((label, first[label][1]) for label in sorted(first))


def says_clash(detail: str) -> bool:
    """Whether a dropped copy's `rejected.jsonl` detail (`Copy.detail`) says a clash."""
    return detail.endswith(f"{CLASH}{_POLICY}")


class Chunk(NamedTuple):
    """A batch of training prints in columns: names (UTF-8, joined) and their byte lengths,
    content hashes (joined), perceptual hashes, which are nearly uniform, and labels."""

    names: bytes
    lengths: np.ndarray
    contents: bytes
    perceptual: np.ndarray
    uniform: np.ndarray
    labels: np.ndarray

    @classmethod
    def of(cls, prints: Sequence[ImagePrint]) -> Chunk:
        names = [p.filename.encode("utf-8") for p in prints]
        return cls(
            b"".join(names),
            np.array([len(n) for n in names], dtype=np.int64),
            b"".join(p.content for p in prints),
            np.array([p.perceptual for p in prints], dtype=np.uint64),
            np.array([p.nearly_uniform for p in prints], dtype=bool),
            np.array([p.label for p in prints], dtype=np.int64),
        )


class TrainingCopies:
    """The training prints, searchable for copies (`copy_of`)."""

    def __init__(self, chunks: Iterable[Chunk], radius: int = fp.DEFAULT_RADIUS):
        chunks = list(chunks)
        self._radius = radius
        self._names = b"".join(c.names for c in chunks)
        lengths = np.concatenate([np.zeros(1, np.int64), *(c.lengths for c in chunks)])
        self._ends = np.cumsum(lengths)
        self._contents = b"".join(c.contents for c in chunks)
        self._perceptual = np.concatenate([np.zeros(0, np.uint64), *(c.perceptual for c in chunks)])
        uniform = np.concatenate([np.zeros(0, bool), *(c.uniform for c in chunks)])
        self._uniform = uniform
        self._labels = np.concatenate([np.zeros(0, np.int64), *(c.labels for c in chunks)])
        self._digest: str | None = None
        # Exact copies: the first 8 bytes of each content hash, sorted.
        heads = np.frombuffer(self._contents, dtype=">u8")[::2].astype(np.uint64)
        self._content_order = np.argsort(heads, kind="stable")
        self._content_heads = heads[self._content_order]
        # Near copies: per block, its values and the prints (not nearly uniform) sorted by them.
        searched = np.flatnonzero(~uniform)
        self._blocks = []
        for shift, width in hs.block_layout(BLOCKS):
            values = (self._perceptual[searched] >> np.uint64(shift)) & np.uint64((1 << width) - 1)
            order = np.argsort(values, kind="stable")
            self._blocks.append((shift, width, values[order].astype(np.uint16), searched[order]))

    def __len__(self) -> int:
        return len(self._perceptual)

    def digest(self) -> str:
        """A hash of every training print (name, content, hash, label), in file-name order:
        what a held-out shard's drops were checked against (its `--resume` fingerprint)."""
        if self._digest is None:
            names = [self._name(i).encode("utf-8") for i in range(len(self))]
            order = sorted(range(len(names)), key=names.__getitem__)
            digest = hashlib.sha256(b"\0".join(names[i] for i in order))
            contents = np.frombuffer(self._contents, np.uint8).reshape(-1, _CONTENT)
            for column in (contents, self._perceptual, self._uniform, self._labels):
                digest.update(np.ascontiguousarray(column[order]).tobytes())
            self._digest = digest.hexdigest()
        return self._digest

    def _name(self, index: int) -> str:
        return self._names[self._ends[index] : self._ends[index + 1]].decode("utf-8")

    def copy_of(self, image: ImagePrint) -> Copy | None:
        """The training image `image` copies, or None."""
        head = np.uint64(int.from_bytes(image.content[:8], "big"))
        low = int(np.searchsorted(self._content_heads, head, side="left"))
        high = int(np.searchsorted(self._content_heads, head, side="right"))
        exact = [
            (self._name(int(i)), int(i))
            for i in self._content_order[low:high]
            if self._contents[int(i) * _CONTENT : (int(i) + 1) * _CONTENT] == image.content
        ]
        if exact:
            labelled = _first_of_each_label(((), n, int(self._labels[i])) for n, i in exact)
            return Copy(min(exact)[0], EXACT, 0, labelled)
        if image.nearly_uniform:
            return None
        found = []
        for shift, width, values, members in self._blocks:
            value = np.uint16((image.perceptual >> shift) & ((1 << width) - 1))
            low = int(np.searchsorted(values, value, side="left"))
            high = int(np.searchsorted(values, value, side="right"))
            candidates = members[low:high]
            distances = hs.popcount(self._perceptual[candidates] ^ np.uint64(image.perceptual))
            near = np.flatnonzero(distances <= self._radius)
            found += [(int(distances[i]), int(candidates[i])) for i in near]
        if not found:
            return None
        named = [((d,), self._name(i), int(self._labels[i])) for d, i in set(found)]
        (distance,), name, _ = min(named)
        return Copy(name, NEAR, distance, _first_of_each_label(named))
