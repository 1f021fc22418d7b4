"""What `plan` reports: the plan of a build (`BuildPlan`, a `SplitPlanReport` per split), as the
JSON of `--json` and as the text `plan` prints, its notes on a rebuild (`rebuild_notes`), and
why the build would fail once its shards are written (`write_failure`: the error budget, the
output disk's room). Computing the plan is `plan`'s (`plan_build`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Sequence
from typing import Any

from beam_pipeline.console.summary import human_bytes, plural
from beam_pipeline.core.entries import IndexEntry, LabelledEntry
from beam_pipeline.core.labels import ANNOTATED, unknown_class_name
from beam_pipeline.core.rejections import DISCOVER, Rejection
from beam_pipeline.stages.budget import needed_fraction, over_budget_message
from beam_pipeline.tree.pairing import ANNOTATION_WITHOUT_IMAGE
from schemas import BACKGROUND, UNLABELLED
from schemas.paths import first_few, is_local, join

ORPHAN_REASONS = (ANNOTATION_WITHOUT_IMAGE, "image_missing")


# Image files under this many bytes are checked as the build's writer checks them (an empty one
# from its listed size, others read: fewer bytes than this each), so that plan counts the
# rejections it will make. No JPEG is this small: its quantisation table, frame and scan headers
# and Huffman tables alone take more (the smallest the build accepts, a 1x1 grey JPEG without
# JFIF header, has 137 bytes), so a `.JPEG` under it is empty, cut short or not a JPEG. Other
# formats can be (a 1x1 PNG has 67 bytes, a GIF 43, a WebP 34): the check, not the size, decides.
SMALL_FILE_BYTES = 125


@dataclasses.dataclass
class SplitPlanReport:
    """What the build would do with one output split."""

    name: str
    kind: str
    images: int = 0
    annotated: int = 0
    without_annotation: int = 0
    folder_class_only: int = 0  # in a class folder, without XML: labelled by the folder
    orphans: dict[str, int] = dataclasses.field(default_factory=dict)
    label_sources: dict[str, int] = dataclasses.field(default_factory=dict)
    class_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    unknown_classes: dict[str, int] = dataclasses.field(default_factory=dict)
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)  # images, by reason
    reported: dict[str, int] = dataclasses.field(default_factory=dict)  # other files, notes
    examples: int = 0
    shards: int = 0
    shards_asked: int | None = None  # --num_shards for the split; more than examples: capped
    examples_per_shard: tuple[int, int] = (0, 0)
    image_bytes: int = 0
    estimated_bytes: int | None = None

    def count_entry(self, entry: IndexEntry) -> None:
        """One index entry of the split: with XML, without in a class folder, or neither."""
        if entry.annotation_filename is not None:
            self.annotated += 1
        elif entry.folder_class is None:
            self.without_annotation += 1
        else:
            self.folder_class_only += 1

    def count_rejection(self, rejection: Rejection) -> None:
        """One rejection (or report) by reason, as an orphan, or of an unknown class; an image
        rejected as it was listed counts among the split's images."""
        if rejection.is_image and rejection.stage == DISCOVER:
            self.images += 1
        _add(self.rejected if rejection.is_image else self.reported, rejection.reason)
        if rejection.reason in ORPHAN_REASONS:
            _add(self.orphans, rejection.reason)
        if rejection.reason == "unknown_class":
            _add(self.unknown_classes, unknown_class_name(rejection.detail) or "?")

    def count_label(self, item: LabelledEntry, names: Sequence[str]) -> None:
        """One example's label source and class (`names`: the vocabulary's)."""
        _add(self.label_sources, item.source)
        if item.label != UNLABELLED:
            self.class_counts[names[item.label]] += 1


def _add(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


@dataclasses.dataclass
class BuildPlan:
    """The plan of a whole build; `refusal` is the build's own message when it would stop
    before it writes, `failure` when it would fail once its shards are written (its error
    budget, counted with the files its writer will reject: `small_files_read` were read)."""

    input_dir: str
    layout: str
    classes: tuple[str, ...]
    vocabulary_source: str
    splits: dict[str, SplitPlanReport]
    rejections: list[Rejection]
    refusal: str | None
    seconds: float
    files_listed: int
    unbuilt: tuple[str, ...] = ()
    shared: dict[tuple[str, ...], int] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the build says of the tree before it starts
    failure: str | None = None
    small_files_read: int = 0

    def to_json(self, rejections: int | None = None) -> dict[str, Any]:
        listed = self.rejections if rejections is None else self.rejections[:rejections]
        return {
            "input_dir": self.input_dir,
            "layout": self.layout,
            "num_classes": len(self.classes),
            "vocabulary": self.vocabulary_source,
            "would_build": self.refusal is None and self.failure is None,
            "refusal": self.refusal,
            "failure": self.failure,
            "files_listed": self.files_listed,
            "small_files_read": self.small_files_read,
            "unbuilt_splits": list(self.unbuilt),
            "shared_images": {"+".join(splits): n for splits, n in self.shared.items()},
            "seconds": round(self.seconds, 3),
            "splits": {name: dataclasses.asdict(split) for name, split in self.splits.items()},
            "rejections": [r.as_dict() for r in listed],
            "num_rejections": len(self.rejections),
        }


def _top(counts: dict[str, int], n: int, reverse: bool) -> str:
    ordered = sorted(counts.items(), key=lambda kv: ((-kv[1] if reverse else kv[1]), kv[0]))
    return ", ".join(f"{name} {count}" for name, count in ordered[:n])


def _has_background(report: SplitPlanReport) -> bool:
    """Whether a split can hold background images (`ANNOTATED`: one without XML, or whose XML
    names no object), or holds some (an export's XML without `<object>`, kind `OBJECTS`)."""
    return report.kind == ANNOTATED or report.class_counts.get(BACKGROUND, 0) > 0


def _image_parts(report: SplitPlanReport) -> str:
    """How a split's images divide (they add up to its count): with XML, without (in a class
    folder or not), and rejected as they were listed (named under `would reject`)."""
    background = " (background)" if report.kind == ANNOTATED else ""
    parts = [f"with XML {report.annotated:,}"]
    if report.folder_class_only and not report.annotated:  # class folders: no XML to speak of
        parts = [f"in a class folder {report.folder_class_only:,}"]
        if report.without_annotation:
            parts.append(f"outside any {report.without_annotation:,}")
    elif report.folder_class_only:
        parts.append(f"without XML in a class folder {report.folder_class_only:,}")
        parts.append(f"without XML or class folder {report.without_annotation:,}{background}")
    else:
        parts.append(f"without XML {report.without_annotation:,}{background}")
    listed = report.annotated + report.without_annotation + report.folder_class_only
    if report.images > listed:
        parts.append(f"rejected as listed {report.images - listed:,} (below)")
    return ", ".join(parts)


def format_plan(plan: BuildPlan, rejections: int = 20) -> str:
    """The plan as the text `plan` prints."""
    read = ""
    if plan.small_files_read:  # (under SMALL_FILE_BYTES: checked as the build checks them)
        read = f" but those of {plural(plan.small_files_read, 'file')} too small to be an image"
    lines = [
        f"Plan for {plan.input_dir} ({plan.layout}): {plan.files_listed:,} files listed, "
        f"no pixels read{read}, nothing written ({plan.seconds:.1f} s)",
        f"classes: {len(plan.classes):,} (from {plan.vocabulary_source})"
        + (", plus background" if any(map(_has_background, plan.splits.values())) else ""),
        "copies and odd images: not looked for (no pixels read; the build finds them with "
        "--duplicates report)",
    ]
    for report in plan.splits.values():
        lines += _split_lines(report)
    if plan.rejections and rejections:
        lines.append("")
        lines.append(
            f"files rejected or reported ({len(plan.rejections):,}; --json lists them all):"
        )
        for rejection in plan.rejections[:rejections]:
            lines.append(f"  {rejection.path}: {rejection.reason}: {rejection.detail}")
        if len(plan.rejections) > rejections:
            lines.append(f"  ... and {len(plan.rejections) - rejections:,} more")
    lines.append("")
    lines += plan.notes
    if plan.refusal is not None:
        lines.append(f"The build would be refused: {plan.refusal}")
    elif plan.failure is not None:
        lines.append(f"The build would fail once its shards are written: {plan.failure}")
    else:
        lines.append("The build would go ahead.")
    return "\n".join(lines)


def _split_lines(report: SplitPlanReport) -> list[str]:
    """One split's paragraph: its images, labels, classes, rejections and shards."""
    lines = ["", f"{report.name} ({report.kind or 'no images'}):"]
    lines.append(f"  images {report.images:,}: {_image_parts(report)}")
    if report.orphans:
        lines.append(f"  orphans: {_counts(report.orphans)}")
    if report.label_sources:
        lines.append(f"  label sources: {_counts(report.label_sources)}")
    if report.class_counts:
        lines += _class_lines(report.class_counts, background=_has_background(report))
    if report.unknown_classes:
        lines.append(f"  unknown classes: {_top(report.unknown_classes, 10, True)}")
    if report.rejected:
        total = sum(report.rejected.values())
        lines.append(f"  would reject {total:,}: {_counts(report.rejected)}")
    if report.reported:
        lines.append(f"  would report (not rejected): {_counts(report.reported)}")
    if report.shards:
        lines += _shard_lines(report)
    return lines


def _class_lines(class_counts: dict[str, int], background: bool) -> list[str]:
    """How many classes a split has images of, and its most and least frequent; background
    among them where the split can have it (`_has_background`; class folders label every
    image)."""
    if not background:
        class_counts = {name: n for name, n in class_counts.items() if name != BACKGROUND}
    present = sum(1 for count in class_counts.values() if count)
    included = " (background included)" if background else ""
    lines = [f"  classes present: {present:,} of {len(class_counts):,}{included}"]
    # Background without images is no news (CLS-LOC has none): left out of these.
    counts = {name: count for name, count in class_counts.items() if count or name != BACKGROUND}
    # (a class without images is no one's most frequent: least frequent names it)
    seen = {name: count for name, count in counts.items() if count}
    lines.append(f"  most frequent: {_top(seen, 10, True) or 'none'}")
    lines.append(f"  least frequent: {_top(counts, 10, False)}")
    return lines


def _shard_lines(report: SplitPlanReport) -> list[str]:
    """A split's shard plan: shards, examples in each, and the bytes of images and records."""
    low, high = report.examples_per_shard
    per_shard = f"{low:,}" if low == high else f"{low:,}-{high:,}"
    estimate = (
        f"about {human_bytes(report.estimated_bytes)} if every image is a JPEG kept as it is"
        if report.estimated_bytes is not None
        else "unknown until resized"
    )
    of = f"{per_shard} {'example' if high == 1 else 'examples'}"
    lines = [
        f"  shards: {report.shards:,} of {of} ({plural(report.examples, 'example')}); "
        f"images {human_bytes(report.image_bytes)}, records {estimate}"
    ]
    if low == 0:
        lines.append("  (a shard left without examples: its images would be rejected as read)")
    if report.shards_asked is not None and report.shards_asked > report.shards:
        lines.append(
            f"  (not the {report.shards_asked:,} shards asked for: a shard holds at "
            "least one example)"
        )
    return lines


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value:,}" for key, value in sorted(counts.items()))


def rebuild_notes(config, reports: dict[str, SplitPlanReport]) -> list[str]:
    """What a rebuild costs or loses: with --overwrite over a complete build, the room its
    staged shards need beside it; without --resume, the shards a stopped rebuild staged."""
    from beam_pipeline.output.directory import STAGING_DIR, list_shard_files, refuse_complete_build
    from beam_pipeline.output.lock import busy_reason

    if not config.output_dir:
        return []
    notes = []
    complete = refuse_complete_build(config.output_dir, overwrite=True)
    staged = list_shard_files(config.output_dir, staged=True)
    if staged and not config.resume and not busy_reason(config.output_dir):  # (else: running)
        them = "it" if len(staged) == 1 else "them"
        notes.append(
            f"Note: {join(config.output_dir, STAGING_DIR)} holds {plural(len(staged), 'shard')} "
            f"a rebuild that stopped wrote; this build deletes {them}, --resume"
            f"{' with --overwrite' if complete else ''} keeps what it would write again"
        )
    if not (config.overwrite and complete):
        return notes
    sizes = [r.estimated_bytes for r in reports.values()]
    needed = None if None in sizes else sum(size or 0 for size in sizes)
    if needed is None:  # (resized: the size is known once the images are)
        built = sum(list_shard_files(config.output_dir).values())
        size = f"their size unknown until resized (the build there takes {human_bytes(built)})"
    else:
        size = f"about {human_bytes(needed)}"
    note = (
        f"Note: {config.output_dir} holds a complete build, kept until the rebuild commits: "
        f"the new shards, {size}, wait beside it in {STAGING_DIR}/"
    )
    if is_local(config.output_dir) and os.path.isdir(config.output_dir):
        free = shutil.disk_usage(config.output_dir).free
        short = needed is not None and free <= needed
        note += f" ({human_bytes(free)} free{': not enough' if short else ''})"
    return [*notes, note]


def space_failure(config, reports: dict[str, SplitPlanReport]) -> str | None:
    """Why the build would run out of room: a local output whose disk has less free than the
    records' estimate (less the shards a --resume keeps), or None (also where the size is
    unknown until resized)."""
    from beam_pipeline.output.directory import list_shard_files

    sizes = [r.estimated_bytes for r in reports.values()]
    if not config.output_dir or not is_local(config.output_dir) or None in sizes:
        return None
    path = os.path.abspath(config.output_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    kept = sum(list_shard_files(config.output_dir).values()) if config.resume else 0
    needed, free = sum(size or 0 for size in sizes) - kept, shutil.disk_usage(path).free
    if free >= needed:
        return None
    return (
        f"the disk of {config.output_dir} has {human_bytes(free)} free, and the records need "
        f"about {human_bytes(needed)}: free space on it, or give --output_dir a disk with room"
    )


def write_failure(config, counts, rejections, unread, reports) -> str | None:
    """Why the build would fail once its shards are written, as it words it, or None: its
    error budget counted with the files its writer rejects (`unread`: `_write_budget`), or a
    disk without room for the records (`space_failure`)."""
    budget = _write_budget(config.max_bad_fraction, counts, rejections, unread) if unread else None
    for name, report in reports.items():  # (`assemble_info`'s: whatever the budget)
        if report.images and sum(report.rejected.values()) >= report.images:
            budget = budget or (
                f"split {name!r}: all {report.images} images would be rejected "
                f"({report.rejected}), so it would hold none; mend them, or leave the split out "
                "(--splits)"
            )
    return budget or space_failure(config, reports)


def _write_budget(max_bad_fraction: float, counts, rejections, unread) -> str | None:
    """Why the build would fail once its shards are written, as it words it (its error budget
    counted with the files its writer rejects: `unread`, named), or None."""
    images = [r for r in rejections if r.is_image]
    total = sum(counts.values()) + sum(1 for r in images if r.stage == DISCOVER)
    bad = len(images)
    if not total or bad <= max_bad_fraction * total:
        return None
    message = over_budget_message(max_bad_fraction, bad, total, images)
    kinds = (
        (f"too small to be an image (under {SMALL_FILE_BYTES} bytes)", False),
        ("boxes without area in their image", True),
    )
    parts = [
        f"{title}: {first_few([f'{r.path} ({r.reason}: {r.detail})' for r in found], 5)}"
        for title, boxes in kinds
        if (found := [r for r in sorted(unread) if (r.reason in _BOX_REASONS) == boxes])
    ]
    return (
        f"{message}; {'; '.join(parts)}; to build without them, remove them from the tree or "
        f"pass --max_bad_fraction {needed_fraction(bad, total)}"
    )


_BOX_REASONS = ("annotation_box_outside_image", "annotation_degenerate_box")
