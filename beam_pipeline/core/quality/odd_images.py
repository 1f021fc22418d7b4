"""Odd images among those a build stores, reported (never dropped) as cleanvision reports them:
nearly uniform (a blank frame, one colour), tiny, of an extreme aspect ratio, and grey among
colour pictures. Each comes from the print the writer keeps of every image
(`duplicates.ImagePrint`; the thresholds and their figures are `fingerprints`'), listed in
`odd_images.jsonl` and counted in `build_info.json` (`odd_images`), the summary and `stats`.

Grey is odd only where most of the build's images are colour: a collection of grey pictures
(scans, X-rays) lists none of them. It is seen where the build has the colours: a one-channel
JPEG (ImageNet's grey pictures are), or an image it converts. A colour JPEG it stores as it is
was checked in luma only (colour costs +13.5 us an image and the chroma twice that:
benchmarks/RESULTS.md, "Fingerprints"), so a grey picture saved as colour is not seen.
"""

from __future__ import annotations

import collections
import json
import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from beam_pipeline.core.quality import duplicates
from beam_pipeline.core.quality import fingerprints as fp
from beam_pipeline.core.quality.duplicates import ImagePrint

REASONS = (fp.NEARLY_UNIFORM, fp.TINY, fp.EXTREME_ASPECT_RATIO, fp.GREY)
# The tag of a content bucket's odd images among FindDuplicates' parts: (images, grey ones,
# pickled (ImagePrint, reasons) with grey among the reasons of every grey one).
ODD = "odd"
# Grey pictures are odd while they are fewer than this share of the build's images.
GREY_MINORITY = 0.5


def grey_is_odd(images: int, grey: int) -> bool:
    """Whether grey pictures are odd in a build of `images` of which `grey` are grey."""
    return grey < GREY_MINORITY * images


def reasons(image: ImagePrint, grey_odd: bool) -> tuple[str, ...]:
    """What is odd about `image` (`fingerprints.odd_reasons`), `grey` only when `grey_odd`."""
    found = fp.Fingerprint(image.perceptual, image.luma_spread, image.chroma_spread)
    odd = fp.odd_reasons(image.width, image.height, found)
    return tuple(reason for reason in odd if grey_odd or reason != fp.GREY)


def found_in(parts: Iterable[tuple[str, Any]]) -> list[tuple[ImagePrint, tuple[str, ...]]]:
    """The odd images of a build from FindDuplicates' parts, by split and path: grey only
    where most of the images are colour."""
    images, grey, found = 0, 0, []
    for tag, value in parts:
        if tag == ODD:
            images, grey = images + value[0], grey + value[1]
            found += pickle.loads(value[2])
    grey_odd = grey_is_odd(images, grey)
    kept = [(image, tuple(r for r in why if grey_odd or r != fp.GREY)) for image, why in found]
    return sorted(((image, why) for image, why in kept if why), key=lambda pair: pair[0])


def row(image: ImagePrint, why: Sequence[str], class_names: Sequence[str]) -> str:
    """The `odd_images.jsonl` line of one image."""
    name = class_names[image.label] if 0 <= image.label < len(class_names) else ""
    return json.dumps(
        {
            "split": image.split,
            "path": image.filename,
            "class": name,
            "reasons": list(why),
            "width": image.width,
            "height": image.height,
        },
        ensure_ascii=False,
    )


def counts(found: Iterable[tuple[ImagePrint, Sequence[str]]]) -> dict[str, int]:
    """Images per reason (each reason of an image counts), every reason named."""
    per_reason = collections.Counter(reason for _, why in found for reason in why)
    return {reason: per_reason[reason] for reason in REASONS}


def note(per_reason: dict[str, int], file: str) -> str | None:
    """What the summary and `stats` say of the odd images, or None without any."""
    said = [
        f"{count:,} {reason.replace('_', ' ')}" + (" among colour" if reason == fp.GREY else "")
        for reason, count in per_reason.items()
        if count
    ]
    return f"Odd images: {', '.join(said)} ({file})" if said else None


def report_problems(lines: Sequence[Any]) -> list[str]:
    """The lines of `odd_images.jsonl` (parsed) that are not an image as `row` writes one:
    a split, a path, one or more of `REASONS`, a width and a height (`verify`)."""
    return [
        f"line {number} is not an odd image as a build writes one"
        for number, line in enumerate(lines, start=1)
        if not (
            isinstance(line, dict)
            and isinstance(line.get("split"), str)
            and isinstance(line.get("path"), str)
            and isinstance(line.get("reasons"), list)
            and line["reasons"]
            and all(reason in REASONS for reason in line["reasons"])
            and all(type(line.get(side)) is int for side in ("width", "height"))
        )
    ]


def count_problems(lines: Sequence[Any], recorded: dict[str, int], counted_in: str) -> list[str]:
    """`report_problems`, and where the well-formed `lines` count their reasons otherwise than
    the build's metadata does (`recorded`, from the file `counted_in`), that too."""
    problems = report_problems(lines)
    reasons = collections.Counter(
        r for line in lines if not report_problems([line]) for r in line["reasons"]
    )
    if {r: reasons.get(r, 0) for r in recorded} != recorded or set(reasons) - set(recorded):
        problems.append(f"lists {dict(sorted(reasons.items()))}, {counted_in} counts {recorded}")
    return problems


def unstored_images(
    lines: Sequence[Any],
    stored: Callable[[str, str], bool],
    rejected: Sequence[Any],
    policy: str | None,
) -> list[str]:
    """The well-formed `lines` of `odd_images.jsonl` (parsed) that name no image of the
    build (`duplicates.unstored`): the list is of the images the build stored."""
    named = [
        (number, line["split"], line["path"])
        for number, line in enumerate(lines, start=1)
        if not report_problems([line])
    ]
    return duplicates.unstored(
        named, stored, rejected, policy, "it lists only images the build stored"
    )
