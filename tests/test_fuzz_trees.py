"""Property tests (Hypothesis) over whole trees: random class folders holding images, damaged
and empty files, odd names, stray files and links (to a file outside, to nothing, in a loop, two
names for one file). Every build either refuses the tree loudly or accounts for every entry:
written (labelled with its folder's class) or named in `rejected.jsonl`, never both, never
neither. Each example is a real in-process build, so the budget is small (`slow`); a campaign:
`TREE_FUZZ_EXAMPLES=500 ./run_tests.sh tests/test_fuzz_trees.py`."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest
from helpers import build, dead_letters, jpeg_bytes, read_split
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from beam_pipeline.failures import BuildFailed
from beam_pipeline.tree.layouts import LayoutError
from schemas import features as F

CLASSES = ["n01440764", "n02102040", "café", "with space", "Dog"]
NAMES = st.one_of(
    st.sampled_from(["a", "IMG_0001", "-dash", "ünï", "x" * 120, "two  spaces", "dot.ted"]),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\x00"),
        min_size=1,
        max_size=12,
    ).filter(lambda name: name not in (".", "..") and not name.startswith("._")),
)
ENTRIES = st.sampled_from(
    [
        "jpeg",
        "jpeg",
        "jpeg",
        "empty",
        "text_named_jpeg",
        "cut_jpeg",
        "stray_txt",
        "link_outside",
        "link_to_nothing",
        "link_loop",
        "second_name",
    ]
)


@st.composite
def trees(draw):
    """{class: [(entry kind, file stem)]}: two or three classes, one to five entries each."""
    classes = draw(st.lists(st.sampled_from(CLASSES), min_size=2, max_size=3, unique=True))
    return {
        name: draw(
            st.lists(st.tuples(ENTRIES, NAMES), min_size=1, max_size=5, unique_by=lambda e: e[1])
        )
        for name in classes
    }


def write_tree(root: pathlib.Path, spec) -> set[str]:
    """Writes ROOT/Data/CLS-LOC/train/<class>/<entries>; returns every entry's path."""
    outside = root.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "photo.jpg").write_bytes(jpeg_bytes(40, 30))
    entries = set()
    for number, (name, files) in enumerate(spec.items()):
        folder = root / "Data/CLS-LOC/train" / name
        folder.mkdir(parents=True, exist_ok=True)
        first = None
        for kind, stem in files:
            path = folder / (f"{stem}.JPEG" if kind != "stray_txt" else f"{stem}.txt")
            if path.exists() or path.is_symlink():
                continue
            if kind == "jpeg":
                path.write_bytes(jpeg_bytes(32 + number, 24, colour=(40 * number, 90, 160)))
                first = first or path
            elif kind == "empty":
                path.write_bytes(b"")
            elif kind == "text_named_jpeg":
                path.write_text("not a picture\n")
            elif kind == "cut_jpeg":
                path.write_bytes(jpeg_bytes(48, 36)[:200])
            elif kind == "stray_txt":
                path.write_text("notes")
            elif kind == "link_outside":
                path.symlink_to(outside / "photo.jpg")
            elif kind == "link_to_nothing":
                path.symlink_to(outside / "gone.jpg")
            elif kind == "link_loop":
                path.symlink_to(path)
            elif kind == "second_name" and first is not None:
                path.symlink_to(first)
            else:
                continue
            entries.add(str(path))
    return entries


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("TREE_FUZZ_EXAMPLES", "20")),  # a campaign: more
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=trees())
def test_every_entry_of_a_random_tree_is_written_or_named(spec):
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="tree-fuzz-"))
    try:
        root, out = scratch / "tree", scratch / "out"
        entries = write_tree(root, spec)
        try:
            info = build(root, out, "--splits", "train", "--max_bad_fraction", "1")
        except (LayoutError, BuildFailed, ValueError) as refusal:
            event(f"refused: {type(refusal).__name__}")
            assert str(refusal).strip()  # refused loudly, with a message
            assert not (out / "build_info.json").exists()
            return
        written = {}
        for example in read_split(out, "train"):
            path = os.path.join(str(root), example[F.FILENAME][0].decode())
            written[path] = example[F.LABEL_TEXT][0].decode()
        named = (
            [line["path"] for line in dead_letters(out)]
            if (out / "rejected.jsonl").exists()
            else []
        )
        assert len(set(named)) == len(named), "a file is named twice"
        assert not set(written) & set(named), "a file both written and rejected"
        assert entries <= set(written) | set(named), sorted(entries - set(written) - set(named))
        for path, label in written.items():  # the folder's class, whatever the file's name
            assert label == pathlib.Path(path).parent.name, path
        assert info.splits["train"].num_examples == len(written)
        event(f"built: {len(written)} written, {len(named)} named")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
