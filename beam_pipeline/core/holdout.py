"""Held-out splits (`--validation_split`, `--test_split`): a tree's training images divided,
per class, into the splits a tree with only training images lacks.

The division is a function of the images' file names, their classes and the seed alone: the
same on every runner, whatever order the images are listed in, and the same in `plan`. Within
each class (stratum), the images are ordered by SHA-256 of the seed and the file name; the
first `n * fraction` (in decimal, as the fraction is written; rounded half up) go to the first
held-out split, the next to the second, and the rest stay. Every class keeps at least one
training image, so the vocabulary (the classes seen in train) keeps every class; a class with
one image keeps it in train.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction

from beam_pipeline.core.entries import IndexEntry

VALIDATION = "validation"
TEST = "test"


@dataclasses.dataclass(frozen=True)
class HoldOut:
    """What to hold out of which split.

    Attributes:
      source: the output split the images are taken from (`train`).
      fractions: (output split, fraction of each class's images), in the order taken.
      seed: `--split_seed`.
    """

    source: str
    fractions: tuple[tuple[str, float], ...]
    seed: int = 0

    @property
    def splits(self) -> tuple[str, ...]:
        """The held-out output splits, in order."""
        return tuple(name for name, _ in self.fractions)

    def counts(self, images: int) -> tuple[int, ...]:
        """How many of a class's `images` each held-out split takes: each fraction of them,
        rounded half up, taken back from the last split while train would keep none."""
        # In decimal, as the fraction was written: in binary 90 * 0.35 is 31.499999999999996,
        # whose half went down.
        counts = [
            math.floor(images * Fraction(repr(fraction)) + Fraction(1, 2))
            for _, fraction in self.fractions
        ]
        for index in reversed(range(len(counts))):
            excess = sum(counts) - max(images - 1, 0)
            if excess <= 0:
                break
            counts[index] -= min(excess, counts[index])
        return tuple(counts)

    def order(self, filename: str) -> bytes:
        """The sort key of an image within its class."""
        return hashlib.sha256(f"{self.seed}\0{filename}".encode()).digest()

    def assign(self, entries: Iterable[IndexEntry]) -> Iterator[IndexEntry]:
        """The entries of one class of the source split, each with the split it goes to."""
        ordered = sorted(entries, key=lambda entry: (self.order(entry.filename), entry.filename))
        start = 0
        for name, count in zip(self.splits, self.counts(len(ordered)), strict=True):
            for entry in ordered[start : start + count]:
                yield dataclasses.replace(entry, split=name)
            start += count
        yield from ordered[start:]

    def to_metadata(self) -> dict:
        """As recorded in build_info.json's options."""
        return {
            "from": self.source,
            "fractions": dict(self.fractions),
            "seed": self.seed,
            "stratified_by": "class (folder, or the XML's main object; background apart)",
        }


def hold_out(
    entries: Sequence[IndexEntry], spec: HoldOut, stratum: dict[str, str]
) -> list[IndexEntry]:
    """Every entry, those of the source split divided (`stratum`: file name → class; the build
    groups by class on its runner instead, `labelling.HoldOutSplits`)."""
    classes: dict[str, list[IndexEntry]] = {}
    kept = []
    for entry in entries:
        if entry.split == spec.source:
            classes.setdefault(stratum.get(entry.filename, ""), []).append(entry)
        else:
            kept.append(entry)
    for name in sorted(classes):
        kept.extend(spec.assign(classes[name]))
    return kept
