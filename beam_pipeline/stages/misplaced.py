"""XML that paired with no image, taken for the XML of an image without one where it alone
could be: an orphan one folder off (`val/val/X.xml` for `val/X.JPEG`, `n01/X.xml` for a flat
`X.JPEG`) or named otherwise (`img1.xml`, `Img1.JPEG.xml`, another Unicode form for
`Img1.JPEG`). Such an image is rejected (`annotation_misplaced`, `labelling.label_entry`)
rather than built as background or unlabelled: without its XML it would lack its objects.

The build finds them with two GroupByKeys (`labelling.LabelImages`: the orphans by name, then
each orphan's claims by the images without XML); `misplaced_index` does the same in one
process for `plan`.
"""

from __future__ import annotations

import posixpath
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence

from beam_pipeline.core.entries import ParsedEntry
from beam_pipeline.core.rejections import Rejection
from beam_pipeline.tree.layouts import ANNOTATIONS, IMAGE_EXTENSIONS, MIXED, ListingTask
from beam_pipeline.tree.pairing import ANNOTATION_WITHOUT_IMAGE


def misplaced_annotations(
    rejection: Rejection, tasks: Sequence[ListingTask]
) -> Iterator[tuple[tuple[str, str], tuple[str, str]]]:
    """((its split folder's key prefix, file name without extension as `_loose` writes it),
    (path below its annotation folder without the extension, path)) of an XML that pairs with
    no image, for `misplaced_claim`: one a folder deeper or shallower than its image's mirror
    (`val/val/X.xml` for `val/X.JPEG`), or named otherwise, would leave its image without XML,
    and so background or unlabelled. `tasks`: the plan's.

    Keyed by the tree's split folder (`train`, as the image's key starts), not by the output
    split: an image held out of train (`--validation_split`) has its XML in train's folder."""
    if rejection.reason != ANNOTATION_WITHOUT_IMAGE:
        return
    for task in tasks:
        folder = task.directory.rstrip("/") + "/"
        if task.kind in (ANNOTATIONS, MIXED) and task.split and rejection.path.startswith(folder):
            below = posixpath.splitext(rejection.path[len(folder) :])[0]
            yield (task.key_prefix, _loose(posixpath.basename(below))), (below, rejection.path)
            return


def misplaced_index(
    rejections: Iterable[Rejection], tasks: Sequence[ListingTask], parsed: Iterable[ParsedEntry]
) -> dict[str, tuple[str, str]]:
    """In one process, what the build makes with two GroupByKeys (`LabelImages`): the
    `misplaced_annotations` of every rejection, each claimed by the images without XML it
    could belong to (`misplaced_claim`), kept where one image claims it (`one_claim`)."""
    index: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for rejection in rejections:
        for key, found in misplaced_annotations(rejection, tasks):
            index.setdefault(key, []).append(found)
    lists = {key: sorted(found) for key, found in index.items()}
    claims: dict[str, list[tuple[str, str, str]]] = {}
    for entry in parsed:
        for xml, claim in misplaced_claim(entry, lists):
            claims.setdefault(xml, []).append(claim)
    return dict(found for xml, claim in claims.items() for found in one_claim(xml, claim))


def misplaced_claim(
    parsed: ParsedEntry, misplaced: Mapping[tuple[str, str], Sequence[tuple[str, str]]]
) -> Iterator[tuple[str, tuple[str, str, str]]]:
    """(XML path, (image key, the XML's path below its folder, XML path)) for an image without
    XML and the first orphan XML of `misplaced` (from `misplaced_annotations`) of its split
    folder (held out of train or not) that lies where its XML would with folders added or
    left out, or is named otherwise (`_related`)."""
    entry = parsed.entry
    if not misplaced or entry.annotation_filename is not None:
        return
    *prefix, below = entry.key.split("/", 1)  # the image's split folder, its path below it
    found = misplaced.get(("".join(prefix), _loose(posixpath.basename(below))), ())
    for xml_below, xml in found:
        if _related(xml_below, below):
            yield xml, (entry.key, xml_below, xml)
            return


def one_claim(xml: str, claims: Iterable[tuple[str, str, str]]) -> Iterator[tuple[str, tuple]]:
    """(image key, (XML path below, XML path)) where one image claims the orphan XML: several
    that each could be its image (`n01/day/IMG_1`, `n01/night/IMG_1` for `n01/IMG_1.xml`)
    leave it an orphan (reported) and them as they are."""
    found = {claim[0]: claim[1:] for claim in claims}
    if len(found) == 1:
        yield next(iter(found.items()))


def _loose(path: str) -> str:
    """A relative path (without its extension) as file systems and the tools that name XML
    files may have written it otherwise: in another case or Unicode form (a tree copied from
    a Mac has decomposed names), with spaces around a name, or with the image's extension
    before `.xml` (`x.JPEG.xml`). Keys are exact; this finds an image's XML written so."""
    parts = unicodedata.normalize("NFC", path).casefold().split("/")
    parts = [part.strip() for part in parts]
    stem, extension = posixpath.splitext(parts[-1])
    if extension in IMAGE_EXTENSIONS:
        parts[-1] = stem.strip()
    return "/".join(parts)


def _related(first: str, second: str) -> bool:
    """Whether one relative path is the other with one run of folders added (`val/X`,
    `n01/sub/X` and `X`, `n01/X`), written otherwise or not (`_loose`: `Img1` and `img1`);
    not two paths that each have a folder the other lacks (`cat/1` and `dog/1`)."""
    shorter, longer = sorted((_loose(first).split("/"), _loose(second).split("/")), key=len)
    extra = len(longer) - len(shorter)  # one run of folders, added or left out
    return any(longer[:i] + longer[i + extra :] == shorter for i in range(len(shorter)))
