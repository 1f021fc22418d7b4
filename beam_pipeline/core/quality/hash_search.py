"""The search for perceptual hashes within a radius of each other: multi-index hashing.

The 64 bits are cut into k > radius blocks; two hashes within the radius agree on at least one
whole block, so only hashes that share a (block index, block value) are compared. On Beam: key
each hash by its k blocks, group, and run `pairs_within(group, radius, block=i, k=k)` per group
(or `scan_block` over a block's hashes at once): a pair is kept only in the group of the first
block the two share, so each comes out once, with no second grouping. `search` does the same in
one process: per block, sort by value, compare runs. The hashes: `fingerprints`.

Figures: benchmarks/RESULTS.md, "Fingerprints".
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from beam_pipeline.core.quality.fingerprints import DEFAULT_RADIUS, HASH_BITS


class _Sortable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Sortable)  # ids of hashes: paths, (split, path), ints


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount(values: np.ndarray) -> np.ndarray:
    """Set bits of each uint64, as uint8 (NumPy 2's `bitwise_count`, or a byte table on 1.26)."""
    values = np.ascontiguousarray(values, dtype=np.uint64)
    count = getattr(np, "bitwise_count", None)
    if count is not None:
        return count(values)
    return _BYTE_BITS[values.view(np.uint8)].reshape(*values.shape, 8).sum(axis=-1, dtype=np.uint8)


@functools.cache
def block_layout(k: int) -> tuple[tuple[int, int], ...]:
    """(shift, width) of each of the `k` blocks of a 64-bit hash, block 0 the most significant
    bits; widths differ by at most one (k = 5: 13, 13, 13, 13, 12)."""
    if not 1 <= k <= HASH_BITS:
        raise ValueError(f"a 64-bit hash splits into 1 to 64 blocks, not {k}")
    layout, top = [], HASH_BITS
    for index in range(k):
        width = HASH_BITS // k + (1 if index < HASH_BITS % k else 0)
        top -= width
        layout.append((top, width))
    return tuple(layout)


def blocks(hash_value: int, k: int) -> list[tuple[int, int]]:
    """(block index, block value) of each of the `k` blocks of `hash_value`: the grouping keys
    of the multi-index search."""
    return [
        (index, (hash_value >> shift) & ((1 << width) - 1))
        for index, (shift, width) in enumerate(block_layout(k))
    ]


def _earlier_masks(block: int | None, k: int | None) -> list[int]:
    """Bit masks of the blocks before `block`: a pair equal on one of them is another group's."""
    if block is None:
        return []
    if k is None or not 0 <= block < k:
        raise ValueError(f"block {block} needs the number of blocks k > block, not {k}")
    return [((1 << width) - 1) << shift for shift, width in block_layout(k)[:block]]


def _check_radius(radius: int, k: int) -> None:
    if not 0 <= radius < k:
        raise ValueError(
            f"a search within radius {radius} needs more than {radius} blocks (k = {k}): "
            "two hashes that differ in fewer bits than blocks agree on a whole block"
        )


def pairs_within(
    hashes: Mapping[K, int], radius: int, *, block: int | None = None, k: int | None = None
) -> set[tuple[K, K, int]]:
    """Every pair of `hashes` (id → hash; ids sortable) within `radius` bits, as (id, id,
    distance) with the smaller id first.

    `hashes` is one group of the search; with `block` and `k` it is the group of one (block
    index `block`, value) key of a `k`-block grouping, and a pair is kept only where `block` is
    the first block the two hashes share (each pair from one group). Cost: one vectorised
    comparison per member, O(m^2) for m members (22 ms for 2,600: 1.33M hashes give 7 x 512
    such groups at radius 6); a group past `search`'s `max_run` is better reported crowded.
    """
    if k is not None:
        _check_radius(radius, k)
    earlier = [np.uint64(mask) for mask in _earlier_masks(block, k)]
    ids = sorted(hashes)
    values = np.array([hashes[key] for key in ids], dtype=np.uint64)
    found: set[tuple[K, K, int]] = set()
    for first in range(len(ids) - 1):
        xor = values[first] ^ values[first + 1 :]
        distance = popcount(xor)
        keep = distance <= radius
        for mask in earlier:
            keep &= (xor & mask) != 0
        for offset in np.flatnonzero(keep).tolist():
            found.add((ids[first], ids[first + 1 + offset], int(distance[offset])))
    return found


class Found(NamedTuple):
    """What `search` found: pairs of indices into its hashes (`first` < `second`) with their
    `distance`, sorted; and the indices of hashes `crowded` out of the comparison (a block
    value shared by more than `max_run` hashes)."""

    first: np.ndarray
    second: np.ndarray
    distance: np.ndarray
    crowded: np.ndarray


def search(
    hashes: Iterable[int] | np.ndarray,
    radius: int = DEFAULT_RADIUS,
    *,
    k: int | None = None,
    max_run: int | None = None,
) -> Found:
    """Every pair of `hashes` within `radius` bits, by multi-index hashing in one process:
    per block (k = radius + 1 by default), sort by block value and compare the hashes of each
    run of equal values. 1.33M random hashes, radius 6: 110 s on one core, 94 MiB at the peak
    (74 bytes a hash) besides the pairs found (17 bytes each).

    A run longer than `max_run` is not compared: its hashes come back `crowded`, to be
    reported as such. Such a bucket is pictures that hash alike rather than copies (10,000
    identical hashes make 5e7 pairs, 1.6 GB); 8,192 at 1.33M hashes is 3x a 9-bit block's
    mean run. Leave out nearly uniform pictures and all but one copy per content hash first.
    """
    values = np.array(hashes, dtype=np.uint64) if not isinstance(hashes, np.ndarray) else hashes
    values = np.ascontiguousarray(values, dtype=np.uint64)
    k = radius + 1 if k is None else k
    _check_radius(radius, k)
    parts = [scan_block(values, index, k, radius, max_run) for index in range(k)]
    first, second, distance = (np.concatenate([part[i] for part in parts]) for i in range(3))
    order = np.lexsort((second, first))
    crowded = np.unique(np.concatenate([part[3] for part in parts]))
    return Found(first[order], second[order], distance[order], crowded)


# scan_block steps one offset at a time; under TAIL_POSITIONS positions left, the rest at once,
# up to TAIL_COMPARISONS (a crowded tree's long runs: 0.12 s to 0.02 for 8,000 images' groups).
TAIL_POSITIONS, TAIL_COMPARISONS = 4096, 1 << 20


def scan_block(
    values: np.ndarray, index: int, k: int, radius: int, max_run: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One block of `search` (k blocks may run on k workers) over uint64 `values`: (first,
    second, distance, crowded indices), the pairs whose first shared block is `index`."""
    _check_radius(radius, k)
    shift, width = block_layout(k)[index]
    keys = (values >> np.uint64(shift)) & np.uint64((1 << width) - 1)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    del keys
    lengths = np.diff(np.append(starts, len(values)))
    # For each sorted position, how many later positions share its run.
    remaining = np.repeat(starts + lengths, lengths) - np.arange(len(values)) - 1
    crowded = np.empty(0, dtype=np.int64)
    if max_run is not None:
        over = np.repeat(lengths > max_run, lengths)
        crowded = order[over]
        remaining[over] = 0
    earlier = [np.uint64(mask) for mask in _earlier_masks(index, k)]
    ordered = values[order]
    firsts, seconds, distances = [], [], []

    def compare(at: np.ndarray, later: np.ndarray) -> None:
        xor = ordered[at] ^ ordered[later]
        distance = popcount(xor)
        near = np.flatnonzero(distance <= radius)
        for mask in earlier:
            near = near[(xor[near] & mask) != 0]
        if near.size:
            a, b = order[at[near]], order[later[near]]
            firsts.append(np.minimum(a, b))
            seconds.append(np.maximum(a, b))
            distances.append(distance[near])

    live = np.flatnonzero(remaining > 0)
    left, offset = remaining[live], 1
    while live.size:  # compare each position with the one `offset` later in its run
        if live.size < TAIL_POSITIONS and (left - offset + 1).sum() <= TAIL_COMPARISONS:
            counts = left - offset + 1  # the last few runs: every comparison left, at once
            at, first = np.repeat(live, counts), np.repeat(np.cumsum(counts) - counts, counts)
            compare(at, at + offset + np.arange(len(at)) - first)
            break
        compare(live, live + offset)
        offset += 1
        still = left >= offset
        live, left = live[still], left[still]
    empty = np.empty(0, dtype=np.int64)
    return (
        np.concatenate([empty, *firsts]),
        np.concatenate([empty, *seconds]),
        np.concatenate([np.empty(0, dtype=np.uint8), *distances]),
        crowded,
    )
