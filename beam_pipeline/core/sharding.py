"""Deterministic global shuffle and balanced shard assignment, as pure functions.

Each example's position is a pure function of (seed, split, relative key): its sort key is a
128-bit BLAKE2b hash of the three, and its rank is its position among all examples of the split
ordered by (sort key, key). Rank r of N goes to shard `((r + 1) * S - 1) // N` of S, so shards
are contiguous rank ranges whose sizes differ by at most one, and the order inside a shard is
rank order.

Ranks are computed without ever holding a split in one place: the high bits of the sort key
pick one of `NUM_BUCKETS` buckets, whose sizes alone make the split's plan
(`SplitPlan.bucket_offsets`: a bucket's first rank is the sum of the sizes of the buckets before
it). A bucket is a contiguous rank range, so it overlaps one shard or a few at a boundary
(`SplitPlan.shards_of_bucket`); each shard receives every member of the buckets it overlaps,
sorts each bucket on its own and keeps the ranks that are its own (`rank_shard`). One shuffle of
the index thus gives every shard its entries in rank order; the buckets on shard boundaries are
sent to both sides, about `num_shards / NUM_BUCKETS` of a split's entries.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

# 65,536 buckets: ImageNet's ~1,100 shards of 128 MB share a boundary bucket of ~20 entries
# each, so ~2% of its entries travel to two shards. The rank does not depend on this number.
BUCKET_BITS = 16
NUM_BUCKETS = 1 << BUCKET_BITS

# Default shard size: TFDS and the inception scripts aim at 100-200 MB per file.
DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024


SORT_KEY_BYTES = 16


def sort_key(seed: int, split: str, key: str) -> bytes:
    """The 16-byte shuffle key of one example."""
    material = f"{seed}\x00{split}\x00{key}".encode("utf-8", "surrogateescape")
    return hashlib.blake2b(material, digest_size=SORT_KEY_BYTES).digest()


def bucket_of(shuffle_key: bytes) -> int:
    """The bucket (0..NUM_BUCKETS-1) of a sort key: its top BUCKET_BITS bits."""
    return int.from_bytes(shuffle_key[:4], "big") >> (32 - BUCKET_BITS)


def shard_of(rank: int, num_examples: int, num_shards: int) -> int:
    """The shard holding `rank`: the largest i with shard_start(i) <= rank."""
    if not 0 <= rank < num_examples:
        raise ValueError(f"rank {rank} outside [0, {num_examples})")
    return ((rank + 1) * num_shards - 1) // num_examples


def shard_start(index: int, num_examples: int, num_shards: int) -> int:
    """First rank of shard `index`."""
    return index * num_examples // num_shards


# The default shard count is rounded up to a power of two up to this, and to a multiple of it
# beyond: a local build hands each worker process every N-th shard (FnApiRunner partitions the
# grouped shards round-robin), so 27 shards on 16 workers take two rounds of which the second
# keeps 11 busy (84%), while 32 keep all 16 busy in both. 2, 4, 8 and 16 workers (and readers)
# then get equal shares; a split larger than the target gets shards between half the target
# and the target.
BALANCED_SHARDS = 16


def default_num_shards(num_bytes: int, target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES) -> int:
    """Number of shards: none above `target_shard_bytes` of input, as few as that allows,
    rounded up to a power of two up to BALANCED_SHARDS and to a multiple of it beyond."""
    needed = max(1, math.ceil(num_bytes / target_shard_bytes))
    if needed <= BALANCED_SHARDS:
        return 1 << (needed - 1).bit_length()
    return math.ceil(needed / BALANCED_SHARDS) * BALANCED_SHARDS


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """How one split is cut: its size, its shard count and each bucket's first rank.

    `plan_split` makes `bucket_offsets` one int64 array, not a tuple of 65,536 ints: Beam's
    side-input cache weighs what it loads object by object, which took 40 ms per load of a
    plan (three stages, in every worker process) against well under 1 ms for the array.
    """

    num_examples: int
    num_shards: int
    bucket_offsets: Sequence[int]

    def rank(self, bucket: int, position: int) -> int:
        return self.bucket_offsets[bucket] + position

    def shard(self, rank: int) -> int:
        return shard_of(rank, self.num_examples, self.num_shards)

    def bucket_size(self, bucket: int) -> int:
        end = (
            self.bucket_offsets[bucket + 1]
            if bucket + 1 < len(self.bucket_offsets)
            else self.num_examples
        )
        return end - self.bucket_offsets[bucket]

    def shards_of_bucket(self, bucket: int) -> range:
        """The shards whose rank ranges the bucket's members fall in (one, or a few)."""
        start, size = self.bucket_offsets[bucket], self.bucket_size(bucket)
        if size == 0:
            return range(0)
        return range(self.shard(start), self.shard(start + size - 1) + 1)


class ShardPlanMismatch(RuntimeError):
    """A shard received other members than its plan counts: the runner lost or duplicated some."""


def rank_shard(
    members: Iterable[tuple[bytes, str, T]], plan: SplitPlan, shard: int
) -> list[tuple[int, T]]:
    """(rank, item) of the members whose rank falls in `shard`, in rank order.

    `members` are (sort key, key, item) for every member of each bucket that overlaps the shard
    (`SplitPlan.shards_of_bucket`), in any order. Raises ShardPlanMismatch when a bucket's count
    or the shard's differs from the plan's.
    """
    by_bucket: dict[int, list] = {}
    for member in members:
        by_bucket.setdefault(bucket_of(member[0]), []).append(member)
    ranked = []
    for bucket, group in by_bucket.items():
        if len(group) != plan.bucket_size(bucket) or shard not in plan.shards_of_bucket(bucket):
            raise ShardPlanMismatch(
                f"shard {shard} received {len(group)} entries of bucket {bucket}, whose plan "
                f"holds {plan.bucket_size(bucket)} in shards {list(plan.shards_of_bucket(bucket))}"
            )
        group.sort(key=lambda member: (member[0], member[1]))
        for position, (_, _, item) in enumerate(group):
            rank = plan.rank(bucket, position)
            if plan.shard(rank) == shard:
                ranked.append((rank, item))
    expected = shard_start(shard + 1, plan.num_examples, plan.num_shards) - shard_start(
        shard, plan.num_examples, plan.num_shards
    )
    if len(ranked) != expected:
        raise ShardPlanMismatch(f"shard {shard} received {len(ranked)} of its {expected} entries")
    ranked.sort(key=lambda ranked_item: ranked_item[0])
    return ranked


def plan_split(
    bucket_counts: Mapping[int, int],
    num_bytes: int,
    num_shards: int | None,
    target_shard_bytes: int,
) -> SplitPlan:
    """Builds the plan of one split from its per-bucket counts.

    Args:
      bucket_counts: number of examples in each non-empty bucket.
      num_bytes: total size of the split's image files, for the default shard count.
      num_shards: the requested shard count, or None for the default. Never more shards than
        examples, so no shard is empty.
      target_shard_bytes: what the default aims at (--target_shard_mb); required, so that
        `plan` and the build cannot plan with different ones.
    """
    offsets, total = [], 0
    for bucket in range(NUM_BUCKETS):
        offsets.append(total)
        total += bucket_counts.get(bucket, 0)
    if total == 0:
        raise ValueError("cannot plan an empty split")
    wanted = (
        num_shards if num_shards is not None else default_num_shards(num_bytes, target_shard_bytes)
    )
    return SplitPlan(
        num_examples=total, num_shards=min(wanted, total), bucket_offsets=array.array("q", offsets)
    )
