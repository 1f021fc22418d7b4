"""benchmarks/duplicates_scale.py: its synthetic prints are a tree's (every entry once, in
shards of index_scale's size, with the planted copies it claims), and the build's copy finder
finds every planted copy among them, and nothing else, on the in-process runner."""

from __future__ import annotations

import collections

from benchmarks.duplicates_scale import Layout, planted_groups, run_search, shard_prints

ENTRIES = 3000


def test_the_prints_are_a_trees_with_the_planted_copies():
    layout = Layout(ENTRIES)
    prints = [print_ for shard in layout.shards() for print_ in shard_prints(layout, *shard)]
    assert len({(p.split, p.filename) for p in prints}) == len(prints) == ENTRIES
    assert collections.Counter(p.split for p in prints) == {"train": 2887, "validation": 113}
    assert [len(shard_prints(layout, *shard)) for shard in layout.shards()] == [1443, 1444, 113]
    assert sum(p.nearly_uniform for p in prints) == 3
    assert len({p.perceptual for p in prints if p.nearly_uniform}) == 1
    by_name = {(p.split, p.filename): p for p in prints}
    planted = [key for shard in layout.shards() for key, _ in planted_groups(layout, *shard)]
    assert collections.Counter(kind for kind, _ in planted) == {"exact": 30, "near": 30}
    for kind, (first, second) in planted:
        a, b = by_name[first], by_name[second]
        distance = (a.perceptual ^ b.perceptual).bit_count()
        assert (a.content == b.content) == (kind == "exact")
        assert distance == 0 if kind == "exact" else 1 <= distance <= 6


def test_every_planted_copy_is_found_once_and_nothing_else(tmp_path):
    layout = Layout(ENTRIES)
    leaks = collections.Counter(
        f"{kind} leak"
        for shard in layout.shards()
        for (kind, members), _ in planted_groups(layout, *shard)
        if {split for split, _ in members} == {"train", "validation"}
    )
    counts = run_search(layout, str(tmp_path / "counts.json"), ["--direct_num_workers", "1"])
    assert counts == {"exact found": 30, "near found": 30, **leaks}
    assert sum(leaks.values()) > 0
