import collections
import random

import pytest

from beam_pipeline.core import sharding

TARGET = sharding.DEFAULT_TARGET_SHARD_BYTES


@pytest.mark.parametrize("n, s", [(1, 1), (10, 3), (7, 7), (100, 16), (1001, 10), (5, 1)])
def test_shard_of_matches_contiguous_balanced_ranges(n, s):
    sizes = collections.Counter(sharding.shard_of(r, n, s) for r in range(n))
    assert sorted(sizes) == list(range(s))
    assert max(sizes.values()) - min(sizes.values()) <= 1
    for i in range(s):
        start, end = sharding.shard_start(i, n, s), sharding.shard_start(i + 1, n, s)
        assert all(sharding.shard_of(r, n, s) == i for r in range(start, end))


def test_shard_of_rejects_out_of_range_rank():
    with pytest.raises(ValueError):
        sharding.shard_of(10, 10, 2)


def test_sort_key_is_a_pure_function_of_seed_split_and_key():
    key = sharding.sort_key(0, "train", "a/b")
    assert key == sharding.sort_key(0, "train", "a/b")
    assert key != sharding.sort_key(1, "train", "a/b")
    assert key != sharding.sort_key(0, "validation", "a/b")
    assert len(key) == 16
    assert 0 <= sharding.bucket_of(key) < sharding.NUM_BUCKETS


def test_plan_offsets_rank_every_example_once():
    rng = random.Random(0)
    keys = [sharding.sort_key(7, "train", f"img{i}") for i in range(5000)]
    counts = collections.Counter(sharding.bucket_of(k) for k in keys)
    plan = sharding.plan_split(counts, num_bytes=0, num_shards=8, target_shard_bytes=TARGET)
    ranks = []
    by_bucket = collections.defaultdict(list)
    for k in keys:
        by_bucket[sharding.bucket_of(k)].append(k)
    buckets = list(by_bucket.items())
    rng.shuffle(buckets)  # bucket processing order must not matter
    for bucket, members in buckets:
        for position, k in enumerate(sorted(members)):
            ranks.append((plan.rank(bucket, position), k))
    assert sorted(r for r, _ in ranks) == list(range(5000))
    # Rank order equals the global sort-key order.
    assert [k for _, k in sorted(ranks)] == sorted(keys)


def test_default_shard_count_follows_size_and_never_exceeds_examples():
    plan = sharding.plan_split(
        {0: 3}, num_bytes=10 * 2**30, num_shards=None, target_shard_bytes=TARGET
    )
    assert plan.num_shards == 3
    plan = sharding.plan_split(
        {0: 1000}, num_bytes=1000 * 110_000, num_shards=None, target_shard_bytes=TARGET
    )
    assert plan.num_shards == 1
    # 11 GB need 82 shards of at most 128 MiB: 96, a multiple of 16.
    plan = sharding.plan_split(
        {0: 100_000}, num_bytes=100_000 * 110_000, num_shards=None, target_shard_bytes=TARGET
    )
    assert plan.num_shards == 96
    # An explicit count is kept as it is.
    plan = sharding.plan_split({0: 100_000}, num_bytes=0, num_shards=82, target_shard_bytes=TARGET)
    assert plan.num_shards == 82


@pytest.mark.parametrize(
    ("needed", "shards"),
    [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16), (16, 16), (17, 32), (27, 32), (33, 48),
     (53, 64), (1044, 1056)],
)  # fmt: skip
def test_default_shard_count_balances_two_to_sixteen_workers(needed, shards):
    # The fewest shards of at most the target, rounded up to a power of two up to 16 and to a
    # multiple of 16 beyond: a local build's N workers each write every N-th shard, so 2, 4, 8
    # and 16 of them get equal shares; no shard is below half the target.
    for num_bytes in (needed * TARGET, (needed - 1) * TARGET + 1):
        count = sharding.default_num_shards(num_bytes, TARGET)
        assert count == shards
        assert num_bytes / count <= TARGET
        assert needed == 1 or num_bytes / count > TARGET / 2
    with pytest.raises(ValueError):
        sharding.plan_split({}, 0, None, TARGET)


def test_a_bucket_on_shard_boundaries_is_ranked_by_every_shard_it_overlaps():
    # Ten members of bucket 0 (and three of a later bucket) in three shards of 4, 4 and 5: bucket
    # 0 spans shards 0-2; each shard gets all its buckets' members and keeps its own ranks.
    keys = [bytes([0, 0, i]) + bytes(13) for i in range(10)]
    keys += [bytes([255, 255, i]) + bytes(13) for i in range(3)]
    members = [(key, f"k{i}", f"item{i}") for i, key in enumerate(keys)]
    rng = random.Random(1)
    rng.shuffle(members)
    plan = sharding.plan_split(collections.Counter(map(sharding.bucket_of, keys)), 0, 3, TARGET)
    last = sharding.NUM_BUCKETS - 1
    assert list(plan.shards_of_bucket(0)) == [0, 1, 2]
    assert list(plan.shards_of_bucket(last)) == [2]
    assert list(plan.shards_of_bucket(1)) == []
    ranked = []
    for shard in range(3):
        received = [m for m in members if shard in plan.shards_of_bucket(sharding.bucket_of(m[0]))]
        ranked.append(sharding.rank_shard(received, plan, shard))
    assert [[rank for rank, _ in shard] for shard in ranked] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11, 12],
    ]
    assert [item for shard in ranked for _, item in shard] == [f"item{i}" for i in range(13)]
    with pytest.raises(sharding.ShardPlanMismatch, match="shard 1 received 9 entries of bucket 0"):
        sharding.rank_shard([m for m in members if m[0][:2] == bytes(2)][1:], plan, 1)


def test_equal_sort_keys_are_ordered_by_key():
    key = bytes(16)
    plan = sharding.plan_split({0: 3}, 0, 1, TARGET)
    members = [(key, "b", "B"), (key, "c", "C"), (key, "a", "A")]
    assert sharding.rank_shard(members, plan, 0) == [(0, "A"), (1, "B"), (2, "C")]
