"""The error budget's words: how many images a build may lose (`--max_bad_fraction`), what a
build over it says, and the inputs no budget covers (a directory or an XML the listing could
not read). Pure; `finalize` and `plan` raise or print what these say."""

from __future__ import annotations

import collections
import math
import shlex
from collections.abc import Iterable

from beam_pipeline.core.jpegdata import KEEP_FLAG, STRAY_JPEG_BYTES
from beam_pipeline.core.rejections import DISCOVER, Rejection
from beam_pipeline.failures import BuildFailed


def needed_fraction(bad: int, total: int) -> str:
    """The smallest --max_bad_fraction of two decimals that `bad` of `total` keeps within."""
    hundredths = math.ceil(100 * bad / total)
    while hundredths < 100 and bad > hundredths / 100 * total:  # the check's own float sum
        hundredths += 1
    return f"{min(hundredths, 100) / 100:g}"


# What the listing could not read, when what it hides may decide labels: a directory (its
# images, or their XML), or an XML file. An unread image is counted in the error budget instead.
_UNREAD = ("unreadable_directory", "unreadable_file", "broken_symlink", "not_a_regular_file")


def refuse_unread_inputs(rejections: Iterable[Rejection]) -> None:
    """Raises BuildFailed, naming them, for directories or XML files the listing could not read:
    their images would be missing, or labelled background for want of their XML."""
    unread = sorted(
        {
            (r.path, r.reason, r.detail)
            for r in rejections
            if r.stage == DISCOVER
            and (
                r.reason == "unreadable_directory"
                or (r.reason in _UNREAD and r.path.lower().endswith(".xml"))
            )
        }
    )
    if not unread:
        return
    shown = "; ".join(f"{path} ({reason}: {detail})" for path, reason, detail in unread[:5])
    more = f" (and {len(unread) - 5} more)" if len(unread) > 5 else ""
    raise BuildFailed(
        f"the tree holds what the build cannot read: {shown}{more}; the images inside, or "
        "those whose XML it is, would be missing or labelled background. Make them readable "
        f"(e.g. chmod -R a+rX {shlex.quote(unread[0][0])}) or move them out of the tree"
    )


def over_budget_message(
    max_bad_fraction: float, bad: int, total: int, images: list[Rejection], when: str = ""
) -> str:
    """The error budget's refusal: `bad` of `total` images rejected (`images`), `when`."""
    reasons = collections.Counter(r.reason for r in images)
    message = (
        f"{bad} of {total} images rejected{when} ({bad / total:.2%}), more than "
        f"--max_bad_fraction={max_bad_fraction}; reasons {most_frequent(reasons)}"
    )
    denied = [r.path for r in images if r.detail.startswith("PermissionError")]
    if denied:  # (a budget that leaves them out would not cover those found as images are read)
        message += (
            f" ({len(denied)} of them permission denied: make them readable to keep them, "
            f"e.g. chmod -R a+rX {shlex.quote(min(denied))})"
        )
    if reasons[STRAY_JPEG_BYTES]:
        message += (
            f" ({reasons[STRAY_JPEG_BYTES]} {STRAY_JPEG_BYTES}: JPEGs whose scan ended before "
            f"their data, usually damaged and garbled; {KEEP_FLAG} keeps them, reported)"
        )
    return message


def most_frequent(counts: collections.Counter, limit: int | None = None) -> dict:
    """Most frequent first, ties by name: the same message whatever order workers ran in."""
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit])
