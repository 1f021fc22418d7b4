"""What a build lists for the splits it is asked for: the plan of directories per split and
layout (DET's negatives, VOC's years and split lists), and the choice of splits."""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shlex
from collections.abc import Callable, Sequence

from beam_pipeline.tree.folder_trees import default_splits as folder_splits
from beam_pipeline.tree.folder_trees import plan_class_folders, plan_voc_xml
from beam_pipeline.tree.layouts import (
    ANNOTATIONS,
    CLASS_FOLDERS,
    DEFAULT_SPLITS,
    FOLDER_LAYOUTS,
    ILSVRC_CLS_LOC,
    ILSVRC_DET,
    IMAGES,
    MIXED,
    VOC,
    VOC_XML,
    VOC_YEAR,
    DiscoveryPlan,
    HasFiles,
    LayoutError,
    ListingTask,
    TreeAccess,
    output_split,
    parse_split_list,
    split_lists,
    task_name,
    vocabulary_split,
)
from beam_pipeline.tree.listing import same_folder
from beam_pipeline.tree.refusals import (
    dangling_link,
    refuse_dangling_annotation_folders,
    refuse_ids_with_extensions,
    refuse_missing_annotation_folders,
    refuse_nested_voc_annotations,
    refuse_unannotated_voc_years,
)
from schemas.paths import is_local, join


def _voc_years(root: str, match: Callable[[str], list[str]]) -> list[tuple[str, str]]:
    """(year directory, key prefix) of every VOC year at or below `root`."""
    years = []
    if match(join(root, "ImageSets", "Main", "*.txt")):
        years.append((root.rstrip("/"), posixpath.basename(root.rstrip("/"))))
    else:
        for path in match(join(root, "*", "ImageSets", "Main", "*.txt")):
            found = VOC_YEAR.match(path)
            if found:
                year_dir = found.group(1)
                years.append((year_dir, posixpath.basename(year_dir)))
    return sorted(set(years))


def plan_discovery(
    root: str, layout: str, splits: Sequence[str], tree: TreeAccess
) -> DiscoveryPlan:
    """Lists what to walk for the requested input splits (e.g. `train`, `val`), asking `tree`
    what is there; refuses (LayoutError) a tree that would come out mislabelled."""
    root = root.rstrip("/")
    if layout == VOC:
        plan = _plan_voc_tree(root, splits, tree)
    elif layout == CLASS_FOLDERS:
        plan = plan_class_folders(root, splits, tree)
    elif layout == VOC_XML:
        plan = plan_voc_xml(root, splits, tree)
    else:
        plan = _plan_ilsvrc(root, layout, splits, tree)
    refuse_dangling_annotation_folders(plan)
    return _apart(plan)


def default_splits(root: str, layout: str, tree: TreeAccess) -> tuple[str, ...]:
    """The input splits a build makes when `--splits` is not given: train and val, or a
    folder tree's split folders (its root as train when it has none)."""
    if layout in FOLDER_LAYOUTS:
        return folder_splits(root.rstrip("/"), tree)
    return DEFAULT_SPLITS


def _plan_voc_tree(root: str, splits: Sequence[str], tree: TreeAccess) -> DiscoveryPlan:
    read_text = tree.read_text
    if read_text is None:
        raise ValueError("a VOC plan reads the split lists: TreeAccess.read_text is needed")
    plan = _plan_voc(root, splits, tree.match, read_text)
    folders = [task.directory for task in plan.tasks if task.kind == IMAGES]
    _refuse_years_without_lists(root, folders, tree)
    if not any(tree.has_files(folder) for folder in folders):
        if cuts := [cut for folder in folders if (cut := dangling_link(folder, root))]:
            raise LayoutError(f"no images: {'; '.join(cuts)} (a disk not mounted?)")
        raise LayoutError(
            f"the split lists name {len(plan.memberships)} images, but "
            f"{', '.join(folders)} {'is' if len(folders) == 1 else 'are'} empty or missing: "
            "put each year's images in its JPEGImages folder (an annotations-only "
            "download has none)"
        )
    refuse_missing_annotation_folders(_voc_folders(plan, tree.has_files, tree.is_directory))
    refuse_nested_voc_annotations(plan, tree.match)
    refuse_unannotated_voc_years(plan, tree.match, read_text)
    folders = [task.directory for task in plan.tasks if task.kind == ANNOTATIONS]
    if not any(tree.has_files(folder) for folder in folders):  # no XML: unlabelled splits
        unannotated = tuple((split, ", ".join(folders)) for split in plan.splits if split != "test")
        plan = dataclasses.replace(plan, unannotated=unannotated)
    return plan


def _refuse_years_without_lists(root: str, folders: list[str], tree: TreeAccess) -> None:
    """LayoutError for a year folder of a devkit (`root`) with images but no split lists, beside
    years that have theirs: a build would leave its images out without a word."""
    years = {posixpath.dirname(folder) for folder in folders}
    if years == {root}:
        return  # (a year itself)
    for name in tree.subdirectories(root):
        year = join(root, name)
        if year not in years and tree.has_files(join(year, "JPEGImages")):
            raise LayoutError(
                f"{year} holds JPEGImages but no ImageSets/Main/*.txt split lists: a build of "
                f"{root} would leave its images out. Restore its lists, or build the years "
                f"that have theirs alone (--input_dir {sorted(years)[0]})"
            )


def _plan_ilsvrc(root: str, layout: str, splits: Sequence[str], tree: TreeAccess) -> DiscoveryPlan:
    subdir = "DET" if layout == ILSVRC_DET else "CLS-LOC"
    tasks, unannotated, missing = [], [], []
    present = tree.subdirectories(join(root, "Data", subdir))
    for split in splits:
        image_dir = join(root, "Data", subdir, split)
        _refuse_split_without_images(split, image_dir, root, present, tree)
        name = output_split(split)
        folder_classes = layout == ILSVRC_CLS_LOC
        annotation_dir = join(root, "Annotations", subdir, split)
        by_name = folder_classes and tree.has_top_level_files(annotation_dir, ".xml")
        if split != "test" and not tree.has_files(annotation_dir):
            # Class folders label CLS-LOC images without XML (`subdirectories` lists a local
            # directory's; in an object store, one file below a folder tells).
            in_folders = folder_classes and bool(
                tree.subdirectories(image_dir) or tree.has_files(join(image_dir, "*"))
            )
            if not in_folders:
                unannotated.append((name, annotation_dir))
        elif layout == ILSVRC_DET and split != "test":
            missing += _det_folders(
                image_dir, annotation_dir, tree.subdirectories, tree.is_directory
            )
        tasks.append(ListingTask(IMAGES, image_dir, name, split, root, folder_classes, by_name))
        tasks.append(
            ListingTask(ANNOTATIONS, annotation_dir, name, split, root, key_by_name=by_name)
        )
    refuse_missing_annotation_folders(missing)
    unbuilt = tuple(name for name in present if name not in splits and not name.startswith("."))
    return DiscoveryPlan(
        layout,
        root,
        tuple(output_split(s) for s in splits),
        tuple(tasks),
        unbuilt=unbuilt,
        unannotated=tuple(unannotated),
    )


def _refuse_split_without_images(
    split: str, image_dir: str, root: str, present: Sequence[str], tree: TreeAccess
) -> None:
    if not tree.has_files(image_dir):
        if cut := dangling_link(image_dir, root):
            raise LayoutError(f"split {split!r} has no images: {cut} (a disk not mounted?)")
        raise LayoutError(
            f"split {split!r} has no images: {image_dir} is empty or missing; "
            + _choose_splits(present)
        )
    instead = tree.without_images(image_dir)
    if instead is not None:
        raise LayoutError(f"split {split!r} has no images: {image_dir} holds {instead}")


def _apart(plan: DiscoveryPlan) -> DiscoveryPlan:
    """The plan whose tasks know the other tasks' folders of their kind (`foreign`), once no
    two image folders are one (a split folder linked to another split's, or two links to one
    folder): refused, as a build would write the same images into both splits, a validation
    split that is a copy of train. Local trees only (an object store has no links)."""
    reals = {
        task.directory: os.path.realpath(task.directory).rstrip("/") or "/"
        for task in plan.tasks
        if is_local(task.directory)
    }
    images = [
        task for task in plan.tasks if task.kind in (IMAGES, MIXED) and task.directory in reals
    ]
    for number, first in enumerate(images):
        for second in images[number + 1 :]:
            a, b = reals[first.directory], reals[second.directory]
            mounted = not _nested(a, b) and same_folder(first.directory, second.directory)
            if _nested(a, b) or mounted:
                same = f"both {a}" if a == b else f"{a} and {b}, one inside the other"
                shows = f"ls -l {shlex.quote(posixpath.dirname(second.directory))} shows the links"
                if mounted:
                    same = "mounted at both paths: a bind mount"
                    shows = f"findmnt {shlex.quote(second.directory)} shows the mount"
                raise LayoutError(
                    f"{first.directory} and {second.directory} are one folder ({same}): a "
                    f"build would write its images into {task_name(first)} and "
                    f"{task_name(second)} alike. Give each its own images ({shows})"
                )
    # (a class-folder tree's root may be its one split: the folders beside it are no splits)
    split_folders = [task for task in images if task.directory.rstrip("/") != plan.root]
    kinds = [(images, _unbuilt_split_folders(split_folders, set(reals.values())))]
    if plan.layout in (ILSVRC_DET, ILSVRC_CLS_LOC):  # elsewhere one may serve several splits
        xml = [t for t in plan.tasks if t.kind == ANNOTATIONS and t.directory in reals]
        kinds.append((xml, _unbuilt_split_folders(xml, set(reals.values()))))
    # The other folders of a task's kind: a link into one brings another split's files
    # (`Annotations/DET/train/sib -> ../val` made val's XML train's orphans).
    tasks = {id(task): task for task in plan.tasks}
    for kin, unbuilt in kinds:
        for task in kin:
            own, others = reals[task.directory], [reals[o.directory] for o in kin] + unbuilt
            kept = tuple(real for real in dict.fromkeys(others) if not _nested(real, own))
            tasks[id(task)] = dataclasses.replace(task, foreign=kept)
    return dataclasses.replace(plan, tasks=tuple(tasks.values()))


def _unbuilt_split_folders(images: Sequence[ListingTask], built: set[str]) -> list[str]:
    """The real paths of the ILSVRC split folders beside those being built (`Data/CLS-LOC/train`
    when only `val` is): a link into one of them would bring that split's images into this
    one (built one split at a time, validation would hold train's images)."""
    parents = {posixpath.dirname(task.directory) for task in images if task.split}
    found = []
    for parent in sorted(parents):
        try:
            with os.scandir(parent) as entries:
                folders = [entry.path for entry in entries if entry.is_dir()]
        except OSError:
            continue
        for folder in sorted(folders):
            real = os.path.realpath(folder)
            # (a link to the folder above the splits is none of them)
            if not any(_nested(real, b) for b in built):
                found.append(real)
    return found


# ImageNet DET's folders of negative training images (`ILSVRC2013_train_extra0` ... `extra10`),
# which its download ships without annotation folders: background by design.
_DET_NEGATIVES = re.compile(r"ILSVRC\d{4}_train_extra\d+")


def _det_folders(
    image_dir: str,
    annotation_dir: str,
    subdirectories: Callable[[str], list[str]],
    is_directory: Callable[[str], bool],
) -> list[tuple[str, str]]:
    """(image folder, its missing annotation folder) for the folders of an annotated DET split,
    two levels down (`ILSVRC2014_train_0000`, `ILSVRC2013_train/n01443537`). Not one:
    ImageNet's own negatives (`ILSVRC2013_train_extra*`), nor a link to a folder of this split,
    of another (`train/sib -> ../val`) or above them, which the listing reports, never enters."""
    missing = []
    splits = posixpath.dirname(image_dir.rstrip("/"))
    for name in subdirectories(image_dir):
        images, annotations = join(image_dir, name), join(annotation_dir, name)
        if _links_into(images, splits) or _DET_NEGATIVES.fullmatch(name):
            continue
        if not is_directory(annotations):
            missing.append((images, annotations))
            continue
        for inner in subdirectories(images):
            if not _links_into(join(images, inner), splits) and not is_directory(
                join(annotations, inner)
            ):
                missing.append((join(images, inner), join(annotations, inner)))
    return missing


def _links_into(path: str, top: str) -> bool:
    """Whether the local folder `path` is a link to `top`, to a folder below it, or to one above
    it (a loop)."""
    if not is_local(path) or not os.path.islink(path):
        return False
    real, top_real = os.path.realpath(path), os.path.realpath(top)
    return _nested(real, top_real)


def _nested(first: str, second: str) -> bool:
    """Whether two real paths are one folder, or one lies inside the other."""
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")


def _voc_folders(
    plan: DiscoveryPlan, has_files: HasFiles, is_directory: Callable[[str], bool]
) -> list[tuple[str, str]]:
    """(JPEGImages, its missing Annotations) of each VOC year whose images go into a split
    with another year's XML."""
    folders = [
        (images.directory, annotations.directory)
        for images, annotations in zip(plan.tasks[::2], plan.tasks[1::2], strict=True)
    ]
    if not any(has_files(annotations) for _, annotations in folders):
        return []  # no year is annotated: the split is unlabelled, or refused without classes
    return [
        (images, annotations)
        for images, annotations in folders
        if not is_directory(annotations) and has_files(images)
    ]


def _plan_voc(
    root: str,
    splits: Sequence[str],
    match: Callable[[str], list[str]],
    read_text: Callable[[str], str],
) -> DiscoveryPlan:
    years = _voc_years(root, match)
    if not years:
        raise LayoutError(f"{root} has no ImageSets/Main/*.txt split lists")
    tasks, memberships, notes = [], [], []
    for split in splits:
        listing = [(d, p) for d, p in years if match(join(d, "ImageSets", "Main", f"{split}.txt"))]
        if not listing:
            raise LayoutError(
                f"split {split!r} has no list: {years[0][0]}/ImageSets/Main/{split}.txt is "
                "missing; " + _choose_voc_splits(years, match, split)
            )
        if len(listing) < len(years):  # VOC2012 lists no test: 07+12 trainval, 07 test
            notes.append(_partial_split_note(split, years, listing))
    for year_dir, prefix in years:
        tasks.append(ListingTask(IMAGES, join(year_dir, "JPEGImages"), "", prefix, root))
        tasks.append(ListingTask(ANNOTATIONS, join(year_dir, "Annotations"), "", prefix, root))
        for split in splits:
            list_path = join(year_dir, "ImageSets", "Main", f"{split}.txt")
            if not match(list_path):
                continue
            ids = parse_split_list(read_text(list_path))
            if not ids:  # (a copy that failed: a builder trial built the other years alone)
                raise LayoutError(
                    f"{list_path} lists no image: {prefix}'s {split} images would be left out. "
                    f"Restore the list, or delete it to build {split} from the other years"
                )
            refuse_ids_with_extensions(list_path, ids)
            for image_id in ids:
                memberships.append((join(prefix, image_id), output_split(split)))
    # The lists not asked for, offered beside what is built: not trainval beside train or val.
    unbuilt = _unbuilt_voc_lists(years, splits, {key for key, _ in memberships}, match, read_text)
    return DiscoveryPlan(
        VOC,
        root,
        tuple(output_split(s) for s in splits),
        tuple(tasks),
        tuple(memberships),
        tuple(name for name in unbuilt if name in _disjoint([*splits, *unbuilt])),
        notes=tuple(notes),
    )


def _partial_split_note(split: str, years, listing) -> str:
    """The line saying that a split comes from the years that list it alone."""
    having = ", ".join(prefix for _, prefix in listing)
    lacking = [prefix for year_dir, prefix in years if (year_dir, prefix) not in listing]
    verb = "has" if len(lacking) == 1 else "have"
    return (
        f"Note: the {output_split(split)} split comes from {having} alone ({', '.join(lacking)} "
        f"{verb} no {split} list)"
    )


def _unbuilt_voc_lists(
    years: Sequence[tuple[str, str]],
    splits: Sequence[str],
    built: set[str],
    match: Callable[[str], list[str]],
    read_text: Callable[[str], str],
) -> tuple[str, ...]:
    """The split lists not asked for that name images the build leaves out (`test`, not
    `trainval` when `train` and `val` are built), in any year (a split some years do not
    list is built from those that do)."""
    lists: dict[str, list[tuple[str, str]]] = {}  # name -> (key prefix, path) in each year
    for year_dir, prefix in years:
        for name, path in split_lists(year_dir, match).items():
            if name not in splits:
                lists.setdefault(name, []).append((prefix, path))
    unbuilt = []
    for name, found in sorted(lists.items()):
        for prefix, path in found:
            if any(join(prefix, i) not in built for i in parse_split_list(read_text(path))):
                unbuilt.append(name)
                break
    return tuple(unbuilt)


def _choose_voc_splits(years: Sequence[tuple[str, str]], match: Callable, missing: str) -> str:
    """The fix for a missing VOC split list: the splits every year lists, and each year's;
    and the year directories to build alone for the `missing` split, if some list it."""
    listed = {}
    for year_dir, prefix in years:
        listed[prefix] = list(split_lists(year_dir, match))
    if len(listed) == 1:
        return _choose_splits(*listed.values())
    common = [
        name for name in next(iter(listed.values())) if all(name in n for n in listed.values())
    ]
    each = "; ".join(f"{prefix}: {names}" for prefix, names in listed.items())
    having = [year_dir for year_dir, prefix in years if missing in listed[prefix]]
    alone = (
        f"; to build {missing} of the "
        f"{'years that list' if len(having) > 1 else 'year that lists'} it, pass "
        f"{' or '.join(shlex.quote(d) for d in having)} as --input_dir"
        if having
        else ""
    )
    if not common:
        return (
            f"no split is listed in every year ({each}): pass one year's directory as "
            f"--input_dir and its splits with --splits{alone}"
        )
    return (
        f"the splits every year lists are {common}: choose with {_splits_flag(common)} (each "
        f"year lists: {each}){alone}"
    )


def _choose_splits(present: Sequence[str]) -> str:
    if not present:
        return "name the splits to build with --splits"
    return f"the splits there are {list(present)}: choose with {_splits_flag(present)}"


def _splits_flag(present: Sequence[str]) -> str:
    """`--splits a,b`, and `--labels_file` too when they hold no train (or trainval) split
    (without it the vocabulary is unknown: the next error would say so)."""
    flag = f"--splits {','.join(_disjoint(present))}"
    if vocabulary_split(present) is None:
        flag += " and a --labels_file naming the classes (there is no train split to find them in)"
    return flag


def _disjoint(present: Sequence[str]) -> list[str]:
    """The splits to suggest: not VOC's trainval beside train or val (it is the two of them:
    building it with either would write their images twice)."""
    return [name for name in present if name != "trainval" or not {"train", "val"} & {*present}]
