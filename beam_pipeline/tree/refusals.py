"""Refusals of trees that would come out mislabelled or incomplete: VOC annotations nested in
another year's, years mostly unannotated, annotation folders missing or dangling, split lists
that name files instead of ids, train classes without images. Each message names the folder
and the fix."""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import stat
import statistics
from collections.abc import Callable, Mapping, Sequence

from beam_pipeline.tree.layouts import (
    ANNOTATIONS,
    CLASS_FOLDERS,
    ILSVRC_CLS_LOC,
    ILSVRC_DET,
    DiscoveryPlan,
    LayoutError,
    output_split,
    parse_split_list,
    split_lists,
    task_name,
)
from beam_pipeline.tree.listing import is_skipped_folder
from schemas.paths import first_few, is_local, join

# A VOC year's images of a split that have XML for fewer than this share of them, in a split
# that has XML, beside a year or a split whose images all have theirs, are images without
# their annotations (VOC2012's test download holds XML only for its Action and Layout images;
# a copy cut short loses a block of files), not a few negatives.
VOC_YEAR_ANNOTATED = 0.9


# An ILSVRC DET image folder of a split (of at least DET_FOLDER_IMAGES images, some with XML)
# where at least DET_FOLDER_UNANNOTATED of the images lack their XML, in a split whose folders
# of that size lack it for at most DET_OTHERS_UNANNOTATED of theirs (the median folder), lost
# its annotations (a copy cut short): its images would come out background. A folder without
# any XML is one of negatives.
DET_FOLDER_IMAGES = 20
DET_FOLDER_UNANNOTATED = 0.25
DET_OTHERS_UNANNOTATED = 0.10


def folder_key(
    layout: str, split: str, filename: str, annotation: str | None
) -> tuple[str, str, bool]:
    """What the index counts an image under: (split, its folder, without XML) in a DET tree,
    for `unannotated_det_folders`; (split, "", False) in any other."""
    if layout != ILSVRC_DET:
        return split, "", False
    return split, posixpath.dirname(filename), annotation is None


def unannotated_det_folders(counts: Mapping[tuple[str, str, bool], int]) -> str | None:
    """The refusal of a DET tree whose image folders lost their XML (see above), naming them,
    or None. `counts`: images by `folder_key`."""
    totals: dict[str, dict[str, list[int]]] = {}
    for (split, folder, unannotated), count in counts.items():
        images = totals.setdefault(split, {}).setdefault(folder, [0, 0])
        images[0] += count
        images[1] += count if unannotated else 0
    for split, folders in sorted(totals.items()):
        sized = [
            without / count for count, without in folders.values() if count >= DET_FOLDER_IMAGES
        ]
        if len(sized) < 3 or statistics.median(sized) > DET_OTHERS_UNANNOTATED:
            continue  # (too few folders to tell, or images without XML are the split's way)
        found = {
            folder: (count, without)
            for folder, (count, without) in sorted(folders.items())
            if count >= DET_FOLDER_IMAGES and DET_FOLDER_UNANNOTATED * count <= without < count
        }
        if found:
            others = sum(c for f, (c, _) in folders.items() if f not in found)
            others_without = sum(w for f, (_, w) in folders.items() if f not in found)
            named = [f"{f}: {w:,} of {c:,} without XML" for f, (c, w) in list(found.items())[:3]]
            return (
                f"split {split!r}: {len(found)} image "
                f"{'folders hold' if len(found) > 1 else 'folder holds'} many images without XML "
                f"({'; '.join(named)}"
                f"{'; ...' if len(found) > 3 else ''}), where only {others_without:,} of the "
                f"split's other {others:,} images lack theirs: a build would label them "
                "background. Restore their XML (a copy cut short?); if those images really "
                "hold no object, give each an XML without <object>"
            )
    return None


def refuse_nested_voc_annotations(plan: DiscoveryPlan, match: Callable[[str], list[str]]) -> None:
    """Refuses a VOC year whose XML lie in folders below its `Annotations` (an archive
    unpacked into it, `Annotations/Annotations/X.xml`; a tool's export folder): VOC pairs
    `JPEGImages/X.jpg` with `Annotations/X.xml` only, so those images came out background,
    or their split unlabelled, with exit 0. Folders that listings skip (`.ipynb_checkpoints`),
    and copies of XML that are in place as well (a backup folder), do not count."""
    for task in plan.tasks:
        if task.kind != ANNOTATIONS:
            continue
        folder = task.directory.rstrip("/")
        below = [path[len(folder) + 1 :] for path in match(join(folder, "*", "**"))]
        # A copy of an XML that is in place too (a backup folder) takes nothing away.
        placed = {posixpath.basename(path).lower() for path in match(join(folder, "*.xml"))}
        nested = [
            path
            for path in below
            if path.lower().endswith(".xml")
            and posixpath.basename(path).lower() not in placed
            and not any(map(is_skipped_folder, path.split("/")[:-1]))
        ]
        if nested:
            shown = first_few(nested, 3)
            raise LayoutError(
                f"{len(nested)} XML file{' lies' if len(nested) == 1 else 's lie'} in folders "
                f"below {folder} ({shown}), where VOC reads {folder}/<image id>.xml only: built, "
                "their images would come out without their objects (background). Move them "
                f"into {folder} itself, or out of the tree"
            )


def refuse_unannotated_voc_years(
    plan: DiscoveryPlan, match: Callable[[str], list[str]], read_text: Callable[[str], str]
) -> None:
    """Refuses a split with XML where one VOC year's images of it mostly have none while the
    images of another year in that split, or of another split, all have theirs: VOC2012's test
    download (annotations were published only for its Action and Layout images), unpacked
    into VOC2012's trainval or beside VOC2007's annotated test, would come out background but
    for a few `person`s. (A split with no XML at all is unlabelled; an empty annotation folder
    declares its year's images negatives, see `refuse_missing_annotation_folders`; with no
    split fully annotated, images without XML are the negatives the user means. The year's
    lists not requested count too: building test alone, after trainval, is the same tree.)"""
    folders = {task.key_prefix: task.directory for task in plan.tasks if task.kind == ANNOTATIONS}
    annotated = {
        prefix: {
            posixpath.splitext(posixpath.basename(path))[0]
            for path in match(join(directory, "*"))
            if path.lower().endswith(".xml")
        }
        for prefix, directory in folders.items()
    }
    counts, missing = _year_counts(plan, folders, annotated, {}, match, read_text)
    if any(xml < images for images, xml in counts.values()):
        # Ids listed without an image are the build's `image_missing` rejections, not images
        # without XML: left out of the counts (the image folders are listed only for this).
        stems = {
            task.key_prefix: {
                posixpath.splitext(posixpath.basename(p))[0]
                for p in match(join(task.directory, "*"))
            }
            for task in plan.tasks
            if task.kind != ANNOTATIONS and task.key_prefix in folders
        }
        counts, missing = _year_counts(plan, folders, annotated, stems, match, read_text)
    complete = [group for group, (images, xml) in counts.items() if xml == images]
    for split in plan.splits:
        years = {prefix: counts[split, prefix] for prefix in folders if (split, prefix) in counts}
        if not any(xml for _, xml in years.values()):
            continue  # unlabelled
        lacking = [  # an empty annotation folder says its images are negatives
            prefix
            for prefix, (images, xml) in years.items()
            if xml < VOC_YEAR_ANNOTATED * images and annotated[prefix]
        ]
        if lacking:
            ids = sorted(missing.get((split, lacking[0]), []))
            _refuse_year(split, lacking[0], years, folders, complete, ids)


def _year_counts(plan, folders, annotated, stems, match, read_text):
    """`_annotated_counts`, and those of each year's split lists the plan does not build (as
    anchors only); `stems`: the ids that have an image, per year ({}: every id)."""
    counts, missing = _annotated_counts(plan, folders, annotated, stems)
    for prefix, directory in folders.items():
        for name, path in split_lists(posixpath.dirname(directory), match).items():
            if (output_split(name), prefix) in counts:
                continue
            ids = [i for i in parse_split_list(read_text(path)) if i in stems.get(prefix, {i})]
            if ids:
                with_xml = sum(image_id in annotated[prefix] for image_id in ids)
                counts[output_split(name), prefix] = [len(ids), with_xml]
    return counts, missing


def _annotated_counts(
    plan: DiscoveryPlan,
    folders: dict[str, str],
    annotated: dict[str, set[str]],
    stems: dict[str, set[str]],
) -> tuple[dict[tuple[str, str], list[int]], dict[tuple[str, str], list[str]]]:
    """(split, year) -> [images, with XML], and (split, year) -> the ids without XML, of the
    images the plan's split lists name (those whose image is among the year's `stems`)."""
    counts: dict[tuple[str, str], list[int]] = {}
    missing: dict[tuple[str, str], list[str]] = {}
    for key, member in plan.memberships:
        prefix, _, image_id = key.partition("/")
        if prefix in folders and image_id in stems.get(prefix, {image_id}):
            count = counts.setdefault((member, prefix), [0, 0])
            count[0] += 1
            count[1] += image_id in annotated[prefix]
            if image_id not in annotated[prefix]:
                missing.setdefault((member, prefix), []).append(image_id)
    return counts, missing


def _refuse_year(split, year, years, folders, complete, ids) -> None:
    """LayoutError for a split whose `year` mostly lacks XML that other years or splits have."""
    images, xml = years[year]
    named = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
    background = f"background ({named}; VOC's images all hold objects)"
    same_split = [prefix for prefix in years if (split, prefix) in complete]
    if same_split:
        raise LayoutError(
            f"split {split!r}: {xml} of {year}'s {images} images have their XML in "
            f"{folders[year]}, while every one of {', '.join(same_split)}'s has: a build "
            f"would label the other {images - xml} {background}. Build the years apart "
            "(--input_dir "
            f"{shlex.quote(posixpath.dirname(folders[same_split[0]]))} for "
            f"{same_split[0]}'s), or restore {year}'s annotations"
        )
    others = sorted({other for other, prefix in complete if prefix == year})
    if others:
        fix = (
            "Leave test out of --splits (VOC2012's test annotations were published for "
            f"its Action and Layout images only), or restore {year}'s annotations"
            if split == "test"
            else f"Restore {year}'s annotations (a copy cut short?)"
        )
        raise LayoutError(
            f"split {split!r}: {xml} of {year}'s {images} images have their XML in "
            f"{folders[year]}, while every image of its {' and '.join(others)} "
            f"split{'s' if len(others) > 1 else ''} has: a build would label the other "
            f"{images - xml} {background}. {fix}; if those images really hold no object, "
            "give each an XML without <object>"
        )


def refuse_unlistable(path: str) -> None:
    """LayoutError where the local `path` is a folder that cannot be listed, or lies below one
    that cannot be entered: a build would take what it holds for missing (a split folder, the
    annotations, VOC's lists) and build the rest without a word. Nothing for a path that is
    not there, or not local (the callers say what is missing)."""
    if not is_local(path):
        return
    try:
        folder = stat.S_ISDIR(os.stat(path).st_mode)
    except PermissionError:  # (a folder above it cannot be entered)
        parent = posixpath.dirname(path.rstrip("/"))
        if parent and parent != path:
            refuse_unlistable(parent)
            raise LayoutError(_unreadable(parent, "entered", "its execute bit is off")) from None
        return
    except OSError:
        return
    if not folder:
        return
    try:
        with os.scandir(path) as entries:
            first = next(entries, None)
    except PermissionError as error:
        raise LayoutError(_unreadable(path, "listed", str(error.strerror))) from None
    if first is None:
        return
    try:
        os.lstat(first.path)
    except PermissionError:
        raise LayoutError(_unreadable(path, "entered", "its execute bit is off")) from None


def _unreadable(folder: str, done: str, why: str) -> str:
    return (
        f"{folder} cannot be {done} ({why}): a build would take what it holds for missing. "
        f"Make it readable (e.g. chmod -R a+rX {shlex.quote(folder)}), or build as its owner"
    )


def dangling_link(path: str, root: str) -> str | None:
    """How a local `path` below `root` is cut off by a link to nothing ("X is a link to Y,
    which does not exist": a disk not mounted, a copy moved), or None. The link may be the
    folder itself or a folder on its way from `root`."""
    if not is_local(path) or not path.startswith(root.rstrip("/") + "/"):
        return None
    current = root.rstrip("/")
    for name in path[len(current) + 1 :].split("/"):
        current = join(current, name)
        if os.path.islink(current) and not os.path.exists(current):
            return f"{current} is a link to {os.readlink(current)}, which does not exist"
        if not os.path.exists(current):
            return None
    return None


def _common(first: str, second: str) -> str:
    return os.path.commonpath([first, second]) if is_local(first) and is_local(second) else ""


def refuse_dangling_annotation_folders(plan: DiscoveryPlan) -> None:
    """Refuses a plan whose annotation folder (of a split other than test) is a link to
    nothing: its split was built unlabelled, or its images background, exit 0, and the
    console said only that the folder was empty or missing."""
    for task in plan.tasks:
        if task.kind != ANNOTATIONS or task.split == "test":
            continue
        if cut := dangling_link(task.directory, task.root):
            raise LayoutError(
                f"{cut} (a disk not mounted, a copy moved?): a build would find no XML in "
                f"{task.directory} for {task_name(task)}. Mount or restore it, or remove the "
                "link to build without those annotations"
            )


def refuse_missing_annotation_folders(missing: Sequence[tuple[str, str]]) -> None:
    """Refuses a tree where an image folder of an annotated split has no annotation folder.

    An image without XML is a negative in DET and VOC (background), but a whole folder of them
    whose XML folder is gone is far more often a copy that lost it (ImageNet's and VOC's own
    images all have XML): building would label every image of the folder background. An empty
    annotation folder says that its images are negatives on purpose.
    """
    if not missing:
        return
    shown = "; ".join(
        f"{images} has no {annotations}"
        + (f" ({cut})" if (cut := dangling_link(annotations, _common(images, annotations))) else "")
        for images, annotations in missing[:5]
    )
    more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
    first = missing[0][1]
    raise LayoutError(
        f"image folders of an annotated split have no annotation folder: {shown}{more}; a "
        "build would label all their images background (no objects). Restore their XML (from "
        "the devkit or the download they came in); if their images really hold no objects, "
        f"create the empty folder to say so, e.g. mkdir -p {shlex.quote(first)}"
    )


_ID_EXTENSIONS = (".jpg", ".jpeg", ".png", ".xml")


def refuse_ids_with_extensions(list_path: str, ids: Sequence[str]) -> None:
    """Refuses a VOC split list whose ids (half or more) end in a file extension: VOC lists
    name images by id (`2008_000008`), and ids written as file names (`IMG_001.JPG`) pair
    with no image, so the build failed for a reason elsewhere (no class in train, or every
    image missing) that did not name the list."""
    named = [image_id for image_id in ids if image_id.lower().endswith(_ID_EXTENSIONS)]
    if not named or len(named) * 2 < len(ids):
        return
    raise LayoutError(
        f"{list_path} names images by file name ({first_few(named, 3)}): VOC split lists "
        "name them by id, without the extension (2008_000008 for JPEGImages/2008_000008.jpg). "
        "Strip the extensions: sed -i -E 's/\\.(jpe?g|png|xml)$//I' "
        f"{shlex.quote(list_path)}"
    )


def refuse_classes_without_images(
    train_dir: str, missing: Sequence[str], layout: str = ILSVRC_CLS_LOC
) -> None:
    """Refuses a CLS-LOC or class-folder train split with a class that holds no image (a
    class folder empty, or its archive not extracted: beside the folders, or inside its own)
    when the vocabulary is the classes seen in train: the class would be left out, and every
    class after it numbered lower than in every other build of the same dataset (and than in
    Keras's `class_names`, which keep an empty folder), with nothing said."""
    if not missing:
        return
    shown = first_few(missing, 5)
    one = len(missing) == 1
    said = " ".join(missing)
    fixes = ""
    if "(a link" in said or "(the same folder as" in said:
        fixes = "point each linked class folder at its own images, "
    if "not UTF-8 text" in said:
        fixes += (
            "rename each folder whose name is not UTF-8 (every name below the split: "
            f"convmv -f latin1 -t utf8 -r --notest {shlex.quote(train_dir)}), "
        )
    raise LayoutError(
        f"split 'train': {len(missing)} class{'' if one else 'es'} in {train_dir} "
        f"hold{'s' if one else ''} no image ({shown}): a build would leave "
        f"{'it' if one else 'them'} out of the vocabulary (the classes seen in train) and "
        f"number the classes after {'it' if one else 'them'} lower than other builds of the "
        f"dataset do. {_fill_classes(said)}{fixes}remove what is not wanted, or pass "
        f"--labels_file ({_class_list(layout)}) to keep every class's index"
    )


def _class_list(layout: str) -> str:
    """The file that names every class, for a refusal's fix."""
    if layout == CLASS_FOLDERS:
        return (
            "a file with a class folder's name a line, in code-point order as Keras sorts them "
            "(LC_ALL=C ls), or a build's labels.txt: an empty class then has 0 images, as in "
            "Keras's class_names"
        )
    return "LOC_synset_mapping.txt, or a build's labels.txt"


def _fill_classes(missing: str) -> str:
    """How to fill the empty class folders `missing` names: ImageNet's synsets (n01440764)
    from their archives; any other class with its images."""
    if not re.search(r"\bn\d{8}\b", missing):
        return "Put each class's images in its folder, "
    return (
        "Extract each class's archive into its folder (ImageNet's, in that folder: for f in "
        'n*.tar; do mkdir -p "${f%.tar}" && tar -xf "$f" -C "${f%.tar}" && rm "$f"; done; an '
        "archive inside its class folder: tar -xf it there), "
    )
