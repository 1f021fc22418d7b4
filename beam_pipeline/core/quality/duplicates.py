"""Copies among a build's images: exact (the same stored bytes) and near (perceptual hashes
within `fingerprints.DEFAULT_RADIUS` bits), found from the fingerprints the writer keeps of
every image it stores (`ImagePrint`), and reported as groups in `duplicates.jsonl`.

The build groups the prints on its runner (`stages.duplicates`): by content hash for exact
copies; for near ones, one image of each content and perceptual hash under each of its blocks
(multi-index hashing: two hashes within the radius share a block), each pair within the radius
found once, in the group of the first block the two share. Nearly uniform images (a blank
frame, a flat colour) are left out of the near search: their hashes crowd together without
being copies. This module holds the pure parts: the prints, the pairs' verdicts, the report.

A held-out image leaks when it copies an image of the build's training split (`train`, or
VOC's `trainval`): a validation image that is a copy of a training one makes the validation
score a memory test (`leaks_of`; a near pair stands for the images of one content and one
perceptual hash as each of its members: each image is judged by its own hash, as drop_leaks
judges it; copies of one image differ in hash where one was converted before it was hashed
and the other holds its stored bytes). A group is a clash when its labelled
members are of different classes (one picture labelled two ways). Both are warnings; a group
within one class and one split is a note.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from beam_pipeline.core.quality import fingerprints as fp
from schemas.payload_checks import DUPLICATES_POLICIES

EXACT, NEAR = "exact", "near"
# --duplicates: whether a build looks for copies, and what it does with a held-out image that
# copies a training one: keeps and reports it, drops it (rejected.jsonl, reason DUPLICATE), or
# fails the build. build_info.json's options.duplicates records the policy, as `payload_checks`
# spells it ("off" by leaving the option out).
REPORT, DROP_LEAKS, FAIL = DUPLICATES_POLICIES
OFF = "off"
POLICIES = (REPORT, DROP_LEAKS, FAIL, OFF)
DUPLICATE = "duplicate"


class Member(NamedTuple):
    """An image of a group, as the report names it."""

    split: str
    filename: str
    label: int


@dataclasses.dataclass(frozen=True, order=True)
class ImagePrint:
    """What the writer keeps of one stored image: where it is, its label, its fingerprints.

    Attributes:
      split, filename: the image's split and its file name in the tree (as the record's).
      label: its label (-1 when unlabelled; the background index for background).
      content: `fingerprints.content_hash` of the stored bytes.
      perceptual, luma_spread, chroma_spread: `fingerprints.Fingerprint`'s.
      width, height: the source's, as decoded before any resize (`--image_policy`): what the
        odd-image checks (tiny, extreme aspect ratio) and `odd_images.jsonl` tell of.
    """

    split: str
    filename: str
    label: int
    content: bytes
    perceptual: int
    luma_spread: int
    chroma_spread: int | None
    width: int
    height: int

    @property
    def nearly_uniform(self) -> bool:
        return self.luma_spread <= fp.UNIFORM_SPREAD

    def to_row(self) -> list:
        """The print as JSON values (the progress record of a shard keeps its prints; field by
        field: `dataclasses.astuple` deep-copies, 14 us a print against 0.1)."""
        return [
            self.split,
            self.filename,
            self.label,
            self.content.hex(),
            self.perceptual,
            self.luma_spread,
            self.chroma_spread,
            self.width,
            self.height,
        ]

    @classmethod
    def from_row(cls, row: Sequence) -> ImagePrint:
        split, filename, label, content, *rest = row
        return cls(split, filename, label, bytes.fromhex(content), *rest)


class Group(NamedTuple):
    """Images that are copies of one another: `kind` EXACT (one content hash) or NEAR (two
    images `distance` bits apart, each the representative of its content and perceptual
    hash). A tuple: made, pickled, hashed and ordered (kind, members, distance) in C, which a
    crowded tree's 21,654 pairs need (benchmarks/RESULTS.md, "Fingerprints")."""

    kind: str
    members: tuple[Member, ...]
    distance: int = 0

    @property
    def clash(self) -> bool:
        """Labelled members of different classes."""
        if len(self.members) == 2:  # (a near pair: 21,654 of a crowded tree's groups)
            a, b = self.members
            return a.label != b.label and a.label >= 0 and b.label >= 0
        return len({m.label for m in self.members if m.label >= 0}) > 1


def report_order(groups: Iterable[Group]) -> list[Group]:
    """The groups once each, in the report's order: kind, then members by split and file name,
    then distance. (`copies_of` hands its near pairs in this order: sorting them again is one
    comparison each, where a set and a sort took 90 ms for 21,654.)"""
    ordered = sorted(groups)
    return [g for i, g in enumerate(ordered) if not i or g != ordered[i - 1]]


# What FindDuplicates hands Finalize, each tagged: a content bucket's exact groups (pickled),
# its representatives' (split, file name, label, the others' (split, file name, label) each
# stands for) by rank (pickled, with the bucket), and one block bucket's near pairs as rows
# of uint64 (first id, second id, distance); an id is (content bucket << 32 | rank).
EXACT_GROUPS, NAMED, NEAR_PAIRS = "exact", "named", "near"
RANK_BITS = 32


def pack(value) -> bytes:
    """A batch as it crosses to Finalize: one element (as a side input, every object of a
    crowded tree's 21,654 groups was measured for the runner's cache: 0.7 s of an 8,000-image
    build; benchmarks/RESULTS.md, "Fingerprints")."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


Alike = dict[Member, tuple[Member, ...]]  # a near pair's member → the images it stands for


def copies_of(parts: Iterable[tuple[str, Any]]) -> tuple[list[Group], Alike]:
    """The groups FindDuplicates found, from its tagged parts: the exact groups as they are,
    then the near pairs in the report's order (`report_order`), each named from its members'
    content buckets (only those buckets unpickled, each member once);
    and, of a near pair's member that stands for other images too (one content hash and one
    perceptual hash), those images, for `leaks_of`. Two images of one content make no near
    pair: they are an exact group."""
    groups: list[Group] = []
    named: dict[int, bytes] = {}
    pairs = []
    for tag, value in parts:
        if tag == EXACT_GROUPS:
            groups += pickle.loads(value)
        elif tag == NAMED:
            named[value[0]] = value[1]
        elif tag == NEAR_PAIRS:
            pairs.append(np.frombuffer(value, np.uint64).reshape(-1, 3))
    alike: Alike = {}
    if not pairs:
        return groups, alike
    rows = np.concatenate(pairs)  # (each pair once: in the group of the first block shared)
    ids, index = np.unique(rows[:, :2], return_inverse=True)
    names = {b: pickle.loads(named[b]) for b in set((ids >> np.uint64(RANK_BITS)).tolist())}
    members = []  # by index into ids: a crowded tree's images are in many pairs
    for id_ in ids.tolist():
        *member, others = names[id_ >> RANK_BITS][id_ & ((1 << RANK_BITS) - 1)]
        members.append(Member(*member))
        if others:
            alike[members[-1]] = (members[-1], *(Member(*m) for m in others))
    rank = np.empty(len(members), dtype=np.int64)  # each member's place in the report's order
    rank[sorted(range(len(members)), key=members.__getitem__)] = np.arange(len(members))
    index = index.reshape(-1, 2)
    first = np.where(rank[index[:, 0]] < rank[index[:, 1]], index[:, 0], index[:, 1])
    second = index[:, 0] + index[:, 1] - first
    group_of = {m: i for i, g in enumerate(groups) if g.kind == EXACT for m in g.members}
    if group_of:  # two representatives of one content (their hashes differ): its exact group
        exact = np.array([group_of.get(m, -1 - i) for i, m in enumerate(members)])
        keep = exact[first] != exact[second]
        first, second, rows = first[keep], second[keep], rows[keep]
    order = np.lexsort((rows[:, 2], rank[second], rank[first]))
    groups += [
        Group(NEAR, (members[a], members[b]), distance)
        for a, b, distance in zip(
            first[order].tolist(), second[order].tolist(), rows[order, 2].tolist(), strict=True
        )
    ]
    return groups, alike


class Leak(NamedTuple):
    """A held-out image that copies a training image: the one, the other, how."""

    member: Member
    original: Member
    kind: str
    distance: int


def leaks_of(
    groups: Sequence[Group], training: str | None, alike: Alike | None = None
) -> tuple[list[Leak], set[Group]]:
    """The held-out images that copy an image of the `training` split, each once (with the
    copy `_rank` picks), and the groups that show one (a held-out member of theirs copies a
    training image). A near pair stands for the images of `alike` (`copies_of`) of both its
    members: the search pairs one image of each content and perceptual hash, so a validation
    image near a test copy of a training image copies the training image too. Each image is
    judged by its own hash, as `leaks.TrainingCopies` judges it for drop_leaks."""
    if training is None:
        return [], set()
    alike = alike or {}
    found: dict[Member, Leak] = {}
    leaking: set[Group] = set()
    exact_group = {m: g for g in groups if g.kind == EXACT for m in g.members}
    for group in groups:
        if group.kind == EXACT:
            sides = [(group.members, group.members)]
        else:
            a, b = group.members
            if (a.split == training) == (b.split == training) and (
                not alike or (a not in alike and b not in alike)
            ):
                continue  # two training images, or two held-out ones (most of a crowd's pairs)
            first, second = alike.get(a, (a,)), alike.get(b, (b,))
            sides = [(first, second), (second, first)]
        for held, others in sides:
            trained = [m for m in others if m.split == training]
            for member in (m for m in held if trained and m.split != training):
                leak = Leak(member, min(trained), group.kind, group.distance)
                # The group shows the leak; a copy a pair's member stands for shows it in its
                # exact group too (so every image `leaked` counts is in a group that leaks).
                leaking.add(group if member in group.members else exact_group[member])
                if member not in found or _rank(leak) < _rank(found[member]):
                    found[member] = leak
    return sorted(found.values()), leaking


def _rank(leak: Leak) -> tuple:
    """The copy a held-out image is said to copy, as `leaks.TrainingCopies` picks it: an exact
    one first, then the nearest, then the smallest file name."""
    return leak.kind != EXACT, leak.distance, leak.original.filename


def rows(groups: Iterable[Group], class_names: Sequence[str], leaking: set[Group]) -> str:
    """The `duplicates.jsonl` lines of `groups`: each group's kind, distance, whether it leaks
    (is in `leaking`) or clashes, and each member's split, file name and class name ("" when
    unlabelled). Each member's JSON is written once: a crowded tree's 21,654 pairs share
    8,000 images."""
    written: dict[Member, str] = {}

    def member(m: Member) -> str:
        text = written.get(m)
        if text is None:
            name = class_names[m.label] if 0 <= m.label < len(class_names) else ""
            text = written[m] = json.dumps({"split": m.split, "path": m.filename, "class": name})
        return text

    def line(group: Group) -> str:
        members = group.members
        if len(members) == 2:  # (a near pair)
            listed = f"{member(members[0])}, {member(members[1])}"
        else:
            listed = ", ".join([member(m) for m in members])
        leak = "true" if leaking and group in leaking else "false"
        return (
            f'{{"kind": "{group.kind}", "distance": {group.distance}, "leak": {leak}, '
            f'"clash": {"true" if group.clash else "false"}, "members": [{listed}]}}\n'
        )

    return "".join(map(line, groups))


def leak_list(leaks: Sequence[Leak], limit: int = 3) -> tuple[str, list[str]]:
    """The held-out images that copy training images, as a refusal says them: one line (how
    many per split, the first `limit` named with the training image they copy), and a line
    for every one."""
    lines: list[str] = []
    per_split: collections.Counter[str] = collections.Counter()
    for leak in leaks:
        how = "exact copy" if leak.kind == EXACT else f"near copy, {leak.distance} bits apart"
        per_split[leak.member.split] += 1
        lines.append(f"{leak.member.filename} copies {leak.original.filename} ({how})")
    counted = " and ".join(f"{count:,} {split}" for split, count in sorted(per_split.items()))
    more = [f"{len(lines) - limit:,} more"] if len(lines) > limit else []
    images = "image copies a training image" if len(lines) == 1 else "images copy training images"
    return f"{counted} {images}: {'; '.join(lines[:limit] + more)}", lines


def counts(groups: Sequence[Group], leaks: Sequence[Leak]) -> dict:
    """What `build_info.json` and the summary say of the groups and the leaks among them."""
    kinds = collections.Counter(group.kind for group in groups)
    images = {(m.split, m.filename) for group in groups for m in group.members}
    leaked = collections.Counter(leak.member.split for leak in leaks)
    return {
        "exact_groups": kinds[EXACT],
        "near_pairs": kinds[NEAR],
        "images": len(images),
        "leaked": dict(sorted(leaked.items())),
        "clashes": sum(group.clash for group in groups),
    }


def report_problems(lines: Sequence[Any], recorded: dict, training: str | None) -> list[str]:
    """What is wrong with `duplicates.jsonl`'s parsed `lines` (`rows`) against the counts
    `build_info.json` `recorded` (`counts`) of a build whose training split is `training`: a
    line that is no group (each member a split, path and class), a clash or leak flag its
    members do not give (a group of a training image and a held-out one leaks; one without a
    held-out image cannot), groups, clashes or images other than the counts say, and fewer
    held-out images in leaking groups than `leaked` counts (each is in one: `leaks_of`)."""
    problems: list[str] = []
    kinds: collections.Counter[str] = collections.Counter()
    images: set[tuple[str, str]] = set()
    shown: set[tuple[str, str]] = set()  # held-out images in groups that leak
    clashes = 0
    for number, line in enumerate(lines, start=1):
        members = line.get("members") if isinstance(line, dict) else None
        if not _is_group(line, members):
            problems.append(f"line {number} is not a group of copies as a build writes one")
            continue
        assert members is not None  # (_is_group)
        kinds[line["kind"]] += 1
        classes = {m["class"] for m in members if m["class"]}
        if line["clash"] != (len(classes) > 1):
            said = json.dumps(line["clash"])  # (as the line says it: false, not False)
            problems.append(f"line {number}: clash is {said}, its classes say otherwise")
        clashes += line["clash"]
        images.update((m["split"], m["path"]) for m in members)
        held = {(m["split"], m["path"]) for m in members if m["split"] != training}
        if line["leak"] and not (training and held):
            why = "no held-out image" if training else "no training split in the build"
            problems.append(f"line {number}: leak is true with {why}")
        elif not line["leak"] and held and len(held) < len(members):
            problems.append(
                f"line {number}: leak is false, yet a held-out image copies a "
                f"{training} image in it"
            )
        shown.update(held if line["leak"] else ())
    counted = {"exact_groups": kinds[EXACT], "near_pairs": kinds[NEAR], "clashes": clashes}
    counted["images"] = len(images)
    for key, value in counted.items():
        if not problems and recorded.get(key) != value:
            problems.append(
                f"its {key} are {value:,}, build_info.json counts {recorded.get(key)!r}"
            )
    in_leaks = collections.Counter(split for split, _ in shown)
    for split, leaked in sorted((recorded.get("leaked") or {}).items()):
        if not problems and in_leaks[split] < leaked:
            problems.append(
                f"its groups that leak hold {in_leaks[split]:,} of the {leaked:,} {split} "
                "images build_info.json counts as leaked"
            )
    leaked = sum((recorded.get("leaked") or {}).values())
    if not problems and bool(shown) != bool(leaked):
        problems.append(
            f"its groups that leak hold {len(shown):,} held-out image"
            f"{'' if len(shown) == 1 else 's'}, "
            f"build_info.json counts {leaked:,} leaked"
        )
    return problems


def unstored_members(
    lines: Sequence[Any],
    stored: Callable[[str, str], bool],
    rejected: Sequence[Any],
    policy: str | None,
) -> list[str]:
    """The members of `duplicates.jsonl`'s parsed `lines` (its groups: `rows`) that are no
    image of the build (`unstored`). A group names stored images only (the writer keeps the
    prints of the images it writes: a copy that `drop_leaks` left out is in no group)."""
    named = [
        (number, member["split"], member["path"])
        for number, line in enumerate(lines, start=1)
        if isinstance(line, dict) and _is_group(line, line.get("members"))
        for member in line["members"]
    ]  # (a line that is no group: report_problems names it)
    return unstored(named, stored, rejected, policy, "a group names only images the build stored")


def unstored(
    named: Iterable[tuple[int, str, str]],
    stored: Callable[[str, str], bool],
    rejected: Sequence[Any],
    policy: str | None,
    why: str,
) -> list[str]:
    """What a report (`duplicates.jsonl`, `odd_images.jsonl`) names that is no image of the
    build: of `named` (line number, split, file name), those that `stored(split, path)` says
    no record of the split holds (`record_checks.stored_names`), each with `why` the report
    names stored images only; where `rejected` (the lines of `rejected.jsonl`) names one, the
    problem says so, with its reason. `policy`: the build's --duplicates, for the fix."""
    problems = []
    fix = f"rebuild with --overwrite --duplicates {policy or REPORT} to write the report again"
    for number, split, path in named:
        if stored(split, path):
            continue
        reason = next((r.get("reason") for r in rejected if _names(r, split, path)), None)
        which = "no record of the build holds ("
        if reason is not None:
            which = f"the build left out (rejected.jsonl, reason {reason}; "
        problems.append(
            f"line {number} names {path} of split {split!r}, which {which}{why}); {fix}"
        )
    return problems


def _names(rejection: Any, split: str, path: str) -> bool:
    """Whether a line of `rejected.jsonl` names the image `path` (a file name in the tree; the
    line's `path`, or `image` for an annotation's, is the file's full path) of `split`."""
    if not isinstance(rejection, dict) or rejection.get("split") != split:
        return False
    named = [rejection.get("path"), rejection.get("image")]
    return any(isinstance(n, str) and (n == path or n.endswith("/" + path)) for n in named)


def _is_group(line: Any, members: Any) -> bool:
    """Whether a parsed line is a group as `rows` writes it."""
    return (
        isinstance(line, dict)
        and line.get("kind") in (EXACT, NEAR)
        and type(line.get("distance")) is int
        and type(line.get("leak")) is bool
        and type(line.get("clash")) is bool
        and isinstance(members, list)
        and len(members) >= 2
        and all(
            isinstance(m, dict)
            and all(isinstance(m.get(k), str) for k in ("split", "path", "class"))
            for m in members
        )
    )
