"""The multi-index search for hashes within a radius (`core/quality/hash_search.py`), against
brute force: the Beam shape (group by block, `pairs_within`), the one-process `search` at every
way `scan_block` can finish, crowds set aside, NumPy without `bitwise_count`."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest

from beam_pipeline.core.quality import fingerprints as fp
from beam_pipeline.core.quality import hash_search as hs


def test_blocks_cut_the_hash_into_k_nearly_equal_parts():
    assert [w for _, w in hs.block_layout(5)] == [13, 13, 13, 13, 12]
    assert [w for _, w in hs.block_layout(7)] == [10, 9, 9, 9, 9, 9, 9]
    value = 0xC8073878346BC67F
    for k in (1, 4, 5, 7, 64):
        rebuilt = 0
        for (_, part), (shift, width) in zip(hs.blocks(value, k), hs.block_layout(k), strict=True):
            assert part < 1 << width
            rebuilt |= part << shift
        assert rebuilt == value and [i for i, _ in hs.blocks(value, k)] == list(range(k))
    with pytest.raises(ValueError):
        hs.block_layout(0)


def random_hashes(count: int, copies: int, radius: int, seed: int) -> dict[str, int]:
    """`count` random hashes, `copies` of them with a copy 0..radius + 2 bits away."""
    rng = np.random.default_rng(seed)
    hashes = {f"h{i:05d}": int(v) for i, v in enumerate(rng.integers(0, 2**64, count, np.uint64))}
    for i in range(copies):
        flips = rng.choice(64, int(rng.integers(0, radius + 3)), replace=False)
        hashes[f"c{i:05d}"] = hashes[f"h{i:05d}"] ^ sum(1 << int(b) for b in flips)
    return hashes


def brute_force(hashes: dict[str, int], radius: int) -> set[tuple[str, str, int]]:
    return {
        (a, b, fp.hamming(hashes[a], hashes[b]))
        for a, b in itertools.combinations(sorted(hashes), 2)
        if fp.hamming(hashes[a], hashes[b]) <= radius
    }


@pytest.mark.parametrize("radius", [0, 2, 4, 6])
def test_grouping_by_block_finds_every_pair_once(radius):
    """The Beam shape: key each hash by its k blocks, group, `pairs_within` each group."""
    hashes = random_hashes(1500, 300, radius, seed=radius)
    k = radius + 1
    groups: dict[tuple[int, int], dict[str, int]] = collections.defaultdict(dict)
    for key, value in hashes.items():
        for block in hs.blocks(value, k):
            groups[block][key] = value
    found = [
        pair
        for (index, _), group in groups.items()
        for pair in hs.pairs_within(group, radius, block=index, k=k)
    ]
    expected = brute_force(hashes, radius)
    assert len(found) == len(set(found))  # each pair from one group only
    assert set(found) == expected
    assert 50 <= len(expected) < 300  # copies on both sides of the radius


# How scan_block finishes: step by step only, the default, and a switch to the tail's all at
# once after a few steps of a crowded run.
TAILS = {"steps": (0, 0), "default": (hs.TAIL_POSITIONS, hs.TAIL_COMPARISONS), "late": (40, 400)}


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("radius", [0, 3, 6])
def test_search_finds_every_pair_within_the_radius(radius, tail, monkeypatch):
    monkeypatch.setattr(hs, "TAIL_POSITIONS", TAILS[tail][0])
    monkeypatch.setattr(hs, "TAIL_COMPARISONS", TAILS[tail][1])
    hashes = random_hashes(3000, 600, radius, seed=10 + radius)
    crowd = {f"crowd{i:03d}": (0xF0F0 << 48) | i for i in range(120)}  # one run of 120
    hashes.update(crowd)
    keys = sorted(hashes)
    found = hs.search([hashes[key] for key in keys], radius)
    got = {
        (keys[a], keys[b], d)
        for a, b, d in zip(
            found.first.tolist(), found.second.tolist(), found.distance.tolist(), strict=True
        )
    }
    assert got == brute_force(hashes, radius)
    order = found.first * len(keys) + found.second
    assert (np.diff(order) > 0).all()  # sorted, no pair twice
    assert len(found.crowded) == 0


def test_pairs_within_one_group_and_the_radius_needs_more_blocks():
    group = {"a": 0b0000, "b": 0b0011, "c": 0b1111, "d": 2**64 - 1}
    assert hs.pairs_within(group, 2) == {("a", "b", 2), ("b", "c", 2)}
    assert hs.pairs_within(group, 4) == {("a", "b", 2), ("b", "c", 2), ("a", "c", 4)}
    with pytest.raises(ValueError, match="needs more than 4 blocks"):
        hs.pairs_within(group, 4, block=0, k=4)
    with pytest.raises(ValueError):
        hs.search([1, 2, 3], 5, k=5)


def test_a_crowd_of_alike_hashes_is_set_aside_past_max_run():
    rng = np.random.default_rng(3)
    hashes = np.concatenate([rng.integers(0, 2**64, 2000, np.uint64), np.zeros(300, np.uint64)])
    everything = hs.search(hashes, 2)
    assert len(everything.first) >= 300 * 299 // 2  # every pair of the crowd
    capped = hs.search(hashes, 2, max_run=100)
    assert set(range(2000, 2300)) <= set(capped.crowded.tolist())
    assert not set(capped.first.tolist()) & set(range(2000, 2300))


def test_the_search_counts_bits_without_numpy_2(monkeypatch):
    """NumPy 1.26 (setup.py's oldest) has no `bitwise_count`: a byte table counts instead."""
    hashes = random_hashes(800, 200, 4, seed=99)
    keys = sorted(hashes)
    expected = hs.search([hashes[key] for key in keys], 4)
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    found = hs.search([hashes[key] for key in keys], 4)
    assert found.distance.tolist() == expected.distance.tolist()
    assert found.first.tolist() == expected.first.tolist()
    assert hs.pairs_within(hashes, 4) == brute_force(hashes, 4)
