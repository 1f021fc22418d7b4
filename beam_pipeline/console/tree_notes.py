"""What the console and `plan` say of a tree before a build starts: the splits it leaves out,
images beside split folders, split folders inside class folders, images several splits share,
splits without annotations (`tree_notes`)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from beam_pipeline.console.summary import plural

if TYPE_CHECKING:
    from beam_pipeline.tree.layouts import DiscoveryPlan


class BuildFlags(Protocol):
    """What the notes on a tree read of a build's flags (an `options.BuildConfig`)."""

    @property
    def splits(self) -> Sequence[str]: ...

    @property
    def validation_split(self) -> float: ...

    @property
    def test_split(self) -> float: ...


def unbuilt_note(
    splits: Sequence[str], unbuilt: Sequence[str], held_out: Sequence[str] = ()
) -> str:
    """The line saying which of the tree's splits a build leaves out, and the flag that adds
    them: `Not built: the tree's test split (--splits is train,val); ...`. With `held_out`
    (the splits --validation_split and --test_split make), the flags that build the tree's
    own: a split the build holds out of train (val, for --validation_split) in its place,
    any other beside them."""
    names = ", ".join(unbuilt)
    noun = "split" if len(unbuilt) == 1 else "splits"
    them = "it" if len(unbuilt) == 1 else "them"
    if held_out:
        from beam_pipeline.tree.layouts import folder_split

        instead = [name for name in unbuilt if folder_split(name) in held_out]
        also = [name for name in unbuilt if name not in instead]
        fixes = []
        if also:
            also_them = "it" if len(also) == 1 else "them"
            fixes.append(f"pass --splits {','.join([*splits, *also])} to build {also_them} too")
        if instead:
            flags = " and ".join(f"--{folder_split(name)}_split" for name in instead)
            ones = "one" if len(instead) == 1 else "ones"
            fixes.append(
                f"to build the tree's {', '.join(instead)} in place of the held-out {ones}, "
                f"drop {flags} and pass --splits {','.join([*splits, *unbuilt])}"
            )
        held, source = " and ".join(held_out), "trainval" if "trainval" in splits else "train"
        return (
            f"Not built: the tree's {names} {noun} (this build holds {held} out of {source}); "
            + ("; or ".join(fixes))
        )
    return (
        f"Not built: the tree's {names} {noun} (--splits is {','.join(splits)}); to build "
        f"{them} too, pass --splits {','.join([*splits, *unbuilt])}"
    )


def outside_note(root: str, outside: Sequence[str]) -> str:
    """The line naming the images that lie beside a tree's split folders, in no split."""
    shown = ", ".join(posixpath.basename(path) for path in outside[:3])
    more = f" and {len(outside) - 3:,} more" if len(outside) > 3 else ""
    it, belongs = ("it", "it belongs") if len(outside) == 1 else ("them", "each belongs")
    return (
        f"Not built: {plural(len(outside), 'image')} in {root} beside its split folders, in "
        f"no split ({shown}{more}); to build {it}, move {it} into the split folder {belongs} to"
    )


def nested_splits_note(folders: Sequence[str]) -> str:
    """The line saying that split folders lie inside class folders (`cat/val/`): their images
    are built into the class folders' split, as Keras's `image_dataset_from_directory` reads
    them; said, as one may have meant them as splits."""
    shown = ", ".join(f"{path}/" for path in folders[:3])
    more = f" and {len(folders) - 3:,} more" if len(folders) > 3 else ""
    return (
        f"Note: {plural(len(folders), 'split folder')} inside class folders ({shown}{more}): "
        "their images are built into the split with the rest, each labelled by its class "
        "folder; to build them as splits, arrange the tree as train/CLASS/, val/CLASS/"
    )


def unannotated_note(split: str, annotation_dir: str, layout: str) -> str:
    """The line warning that a split other than `test` will be built without labels."""
    from beam_pipeline.tree.layouts import ILSVRC_CLS_LOC

    folders = " (or its images into synset folders)" if layout == ILSVRC_CLS_LOC else ""
    return (
        f"Unlabelled: the {split} split has no annotations ({annotation_dir} is empty or "
        f"missing): its examples get label -1; put its XML there{folders} to label it"
    )


def shared_note(shared: Mapping[tuple[str, ...], int]) -> str:
    """The line saying how many image ids VOC's lists put in more than one split (lists that
    overlap), e.g. `Note: 2 image ids are listed in more than one split (train and val: 2);
    ...`: ids, as the lists are read before the images are (an id without its image, listed
    twice, is rejected in each split)."""
    total = sum(shared.values())
    each = ", ".join(f"{' and '.join(splits)}: {count:,}" for splits, count in shared.items())
    return (
        f"Note: {plural(total, 'image id')} {'is' if total == 1 else 'are'} listed in more than "
        f"one split ({each}); each image is written once in every split that lists it"
    )


def tree_notes(plan: DiscoveryPlan, config: BuildFlags) -> list[str]:
    """What the console (and `plan`) says of the tree before a build of `config` starts: the
    splits it leaves out, the images beside split folders or split folders inside class ones,
    the images several splits share, the splits without annotations."""
    held_out = tuple(
        name
        for name, fraction in (("validation", config.validation_split), ("test", config.test_split))
        if fraction
    )
    notes = [unbuilt_note(config.splits, plan.unbuilt, held_out)] if plan.unbuilt else []
    notes += [outside_note(plan.root, plan.outside)] if plan.outside else []
    notes += [nested_splits_note(plan.nested_splits)] if plan.nested_splits else []
    notes += plan.notes
    if shared := plan.shared_images():
        notes.append(shared_note(shared))
    notes += [
        unannotated_note(split, directory, plan.layout) for split, directory in plan.unannotated
    ]
    return notes
