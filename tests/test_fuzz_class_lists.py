"""Property tests (Hypothesis) over the class lists a build reads and writes: a `--labels_file`
(a list, LOC_synset_mapping's lines, an OD API label map), VOC's ImageSets lists, and the
label files a build writes from its classes (labels.txt, label_map.pbtxt, label_map.csv),
which every reader must read back as the classes they were written from.
"""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from beam_pipeline.core.labels import Vocabulary, parse_display_names, parse_labels_file
from beam_pipeline.tree.layouts import parse_split_list
from schemas.label_map import label_map_classes, label_map_csv, label_map_text, renumbered_note

# Names as trees and XML give them: any text, with the characters that break line and quote
# formats drawn often (breaks of every kind, tabs, quotes, backslashes, commas, `#`).
AWKWARD = "\n\r\t \x0b\x0c\x1c\x85\u2028\u2029\u200b\ufeff\"'\\,#{}:"
NAMES = st.text(st.characters() | st.sampled_from(AWKWARD), min_size=1, max_size=10)
# What a file holds, UTF-8 text: no lone surrogates (a name of a tree's is never one either:
# `undecodable_path`).
TEXT = st.characters(exclude_categories=("Cs",)) | st.sampled_from(AWKWARD)
FILE_NAMES = st.text(TEXT, min_size=1, max_size=10)


def tfds_names(text: str) -> list[str]:
    """TFDS's reading of a `*.labels.txt` (`ClassLabel(names_file=...)`): lines split at `\\n`,
    each stripped, blank ones dropped."""
    return [name.strip() for name in text.split("\n") if name.strip()]


@given(st.lists(NAMES, min_size=1, max_size=6, unique=True), st.data())
def test_every_class_the_build_accepts_reads_back_from_each_file_it_writes(names, data):
    try:
        vocabulary = Vocabulary(tuple(names))
    except ValueError:
        event("refused")
        return  # refused, naming the class (test_label_rules)
    classes = vocabulary.classes
    shown = {name: data.draw(st.text(max_size=8)) for name in classes}
    label_map = label_map_text(classes, shown)
    assert label_map_classes(label_map) == (classes, {k: v for k, v in shown.items() if v})
    assert renumbered_note(label_map) is None
    rows = list(csv.reader(io.StringIO(label_map_csv(classes))))  # Model Garden's reader
    assert rows == [[str(number), name] for number, name in enumerate(classes, 1)]
    assert tfds_names("".join(name + "\n" for name in classes)) == list(classes)  # labels.txt


LINES = st.lists(
    st.one_of(
        FILE_NAMES,
        st.builds(lambda a, b: f"{a} {b}", FILE_NAMES, FILE_NAMES),  # LOC_synset_mapping's
        st.builds(lambda a: f"#{a}", FILE_NAMES),
        st.sampled_from(["", "  ", "n01440764 tench, Tinca tinca", "a,b", "\ufeffn01"]),
    ),
    max_size=8,
)
BREAKS = st.sampled_from(["\n", "\r\n", "\r", "\u2028"])


@given(LINES, BREAKS)
def test_a_labels_file_gives_each_lines_first_word_once_or_says_why(lines, newline):
    text = newline.join(lines)
    words = [line.split()[0] for line in text.splitlines() if line.split()]
    expected = [word for word in words if not word.startswith("#")]
    try:
        classes = parse_labels_file(text)
    except ValueError as error:
        event("refused")
        said = str(error)
        assert (
            (not expected and said == "the labels file lists no classes")
            or (len(set(expected)) < len(expected) and "twice" in said)
            or (any("," in word for word in expected) and "is not a class" in said)
        ), said
        return
    assert list(classes) == expected
    assert len(set(classes)) == len(classes)
    assert set(parse_display_names(text)) <= set(classes)
    assert parse_split_list(text) == expected  # VOC's lists: each line's first word too


@st.composite
def label_maps(draw) -> tuple[str, list[dict]]:
    """(an OD API label map's text, its items as drawn): names, ids and display names present
    or not, in any order and quoting, with comments and the fields of COCO's maps."""
    items = []
    for _ in range(draw(st.integers(0, 5))):
        fields = {}
        if draw(st.booleans()) or draw(st.booleans()):
            fields["name"] = draw(FILE_NAMES | st.sampled_from(["", "n01", "cat"]))
        if draw(st.booleans()) or draw(st.booleans()):
            fields["id"] = draw(st.integers(-2, 6) | st.integers(-(2**31), 2**31 - 1))
        if draw(st.booleans()):
            fields["display_name"] = draw(st.text(TEXT, max_size=6))
        items.append(fields)
    text = []
    for fields in items:
        parts = [
            f"{key}: {value}" if key == "id" else f"{key}: {_quoted(draw, value)}"
            for key, value in fields.items()
        ]
        parts = draw(st.permutations(parts))
        text.append("item {" + draw(st.sampled_from(["\n  ", " "])).join(["", *parts]) + "\n}")
        if draw(st.integers(0, 9)) == 0:
            text.append("# a comment")
    return "\n".join(text), items


def _quoted(draw, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    quote = draw(st.sampled_from(["'", '"']))
    return quote + escaped.replace(quote, "\\" + quote) + quote


@given(label_maps())
def test_a_label_map_gives_its_classes_in_id_order_or_says_why(drawn):
    text, items = drawn
    complete = all(item.get("name") and item.get("id", 0) >= 1 for item in items)
    names = [item.get("name") for item in items]
    ids = [item.get("id") for item in items]
    unique = len(set(names)) == len(names) and len(set(ids)) == len(ids)
    try:
        classes, shown = label_map_classes(text)
    except ValueError as error:
        event("refused")
        assert not (items and complete and unique), (text, str(error))
        return
    assert items and complete and unique
    ordered = sorted(items, key=lambda item: item["id"])
    assert classes == tuple(item["name"] for item in ordered)
    assert shown == {i["name"]: i["display_name"] for i in ordered if i.get("display_name")}
    note = renumbered_note(text)
    assert (note is None) == (sorted(ids) == list(range(1, len(ids) + 1)))


@given(label_maps(), st.integers(0, 200), st.sampled_from(["cut", "flip", "insert"]), FILE_NAMES)
def test_a_damaged_label_map_is_read_or_refused_with_a_value_error(drawn, at, how, text):
    original = drawn[0]
    at %= len(original) + 1
    damaged = {
        "cut": original[:at],
        "flip": original[:at] + text[:1] + original[at + 1 :],
        "insert": original[:at] + text + original[at:],
    }[how]
    try:
        classes, _ = label_map_classes(damaged)
    except ValueError:
        event("refused")
        return
    assert classes and len(set(classes)) == len(classes)
    renumbered_note(damaged)  # (read after label_map_classes, which refused what it cannot)


def test_found_a_lone_surrogate_is_refused_as_a_class_name():
    # The campaign's (HYPOTHESIS_PROFILE=campaign): Vocabulary took '\ud800', and writing the
    # label map then raised UnicodeEncodeError (surrogates not allowed).
    with pytest.raises(ValueError, match=r"'x\\ud800' holds the control character '\\ud800'"):
        Vocabulary(("x\ud800",))
