"""Property tests (Hypothesis) over the parsers of untrusted bytes: images and annotation XML,
with the invariants of `benchmarks.fuzz_targets`.

A fixed, derandomized budget runs in every suite (the `ci` profile of conftest.py); a longer
campaign: `HYPOTHESIS_PROFILE=campaign ./run_tests.sh tests/test_fuzz.py`, and the
coverage-guided `python -m benchmarks.fuzz_campaign`. Every input a campaign found is kept in
tests/data/fuzz_cases/ and replayed by `test_found_cases_hold_the_invariants`.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from beam_pipeline.core.images import normalise_image
from benchmarks.fuzz_targets import (
    FOUND,
    POLICIES,
    SEEDS,
    check_found_case,
    check_image_invariants,
    check_xml_invariants,
)


@st.composite
def mutated_images(draw) -> bytes:
    """A seed with up to four mutations: flipped bits, cuts, zeroed, duplicated, inserted or
    deleted runs, a marker segment's length changed."""
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 4))):
        size = len(data)
        if size < 4:
            break
        at = draw(st.integers(0, size - 1))
        run = draw(st.integers(1, 64))
        kind = draw(
            st.sampled_from(["flip", "cut", "zero", "duplicate", "insert", "delete", "length"])
        )
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del data[at:]
        elif kind == "zero":
            data[at : at + run] = bytes(len(data[at : at + run]))
        elif kind == "duplicate":
            data[at:at] = data[draw(st.integers(0, size - 1)) :][:run]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=run))
        elif kind == "delete":
            del data[at : at + run]
        else:
            markers = [
                i for i in range(size - 3) if data[i] == 0xFF and data[i + 1] not in (0, 0xFF)
            ]
            if markers:
                spot = draw(st.sampled_from(markers))
                data[spot + 2 : spot + 4] = draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
    return bytes(data)


@given(mutated_images(), st.sampled_from(POLICIES))
def test_a_stored_image_decodes_in_every_reader_and_shows_its_source(data, policy):
    check_image_invariants(data, policy)


def test_every_seed_is_stored():
    for name, data in SEEDS.items():
        for policy in POLICIES:
            stored = normalise_image(data, policy)
            check_image_invariants(data, policy)
            assert not stored.note, name


NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from(["", " 12 ", "1e3", "0x10", "1_0", "nan", "-inf", "٣", "12px", "1,5"]),
)
NAMES = st.one_of(
    st.sampled_from(["cat", "dog", "n01440764", "Dog", "café"]),
    st.text(min_size=0, max_size=8),
)


@st.composite
def voc_documents(draw) -> bytes:
    """VOC XML from its parts (odd sizes, names and coordinates, missing and extra tags), then
    mutated as files are: cut, a tag deleted or swapped, another encoding, a DTD or entity."""
    parts = ["<annotation><folder>f</folder><filename>x.jpg</filename>"]
    if draw(st.booleans()):
        parts.append(f"<size><width>{draw(NUMBERS)}</width><height>{draw(NUMBERS)}</height></size>")
    for _ in range(draw(st.integers(0, 4))):
        tags = [f"<name>{_escape(draw(NAMES))}</name>"]
        box = "".join(f"<{t}>{draw(NUMBERS)}</{t}>" for t in ("xmin", "ymin", "xmax", "ymax"))
        if draw(st.booleans()):
            box = box.replace(f"<{draw(st.sampled_from(['xmin', 'ymax']))}>", "<gone>", 1)
        tags.append(f"<bndbox>{box}</bndbox>")
        tags.append(f"<difficult>{draw(st.sampled_from(['0', '1', 'True', 'x', '']))}</difficult>")
        if draw(st.booleans()):
            tags.append(
                "<part><name>hand</name><bndbox><xmin>0</xmin><ymin>0</ymin>"
                "<xmax>1</xmax><ymax>1</ymax></bndbox></part>"
            )
        parts.append(f"<object>{''.join(draw(st.permutations(tags)))}</object>")
    text = "".join(parts) + "</annotation>"
    mutation = draw(st.sampled_from(["none", "cut", "delete", "swap", "dtd", "entity"]))
    if mutation == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation in ("delete", "swap"):
        tags = [t for t in ("<name>", "<bndbox>", "<object>", "<size>", "</xmax>") if t in text]
        if tags:
            tag = draw(st.sampled_from(tags))
            text = text.replace(tag, "" if mutation == "delete" else "<other>", 1)
    elif mutation == "dtd":
        text = '<!DOCTYPE annotation SYSTEM "http://127.0.0.1:9/x.dtd">' + text
    elif mutation == "entity":
        text = '<!DOCTYPE a [<!ENTITY e "dog">]>' + text.replace("<name>", "<name>&e;", 1)
    encoding = draw(st.sampled_from(["utf-8", "latin-1", "utf-16"]))
    declared = f'<?xml version="1.0" encoding="{encoding}"?>' if draw(st.booleans()) else ""
    try:
        return (declared + text).encode(encoding)
    except UnicodeEncodeError:
        return text.encode("utf-8")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@given(voc_documents(), st.integers(1, 5000), st.integers(1, 5000))
def test_annotations_parse_to_sound_boxes_and_labels_or_are_refused(data, width, height):
    check_xml_invariants(data, width, height)


def test_found_cases_hold_the_invariants():
    # (records/: the readers' cases, tests/test_fuzz_records.py)
    cases = sorted(p for p in FOUND.iterdir() if p.is_file() and p.name != "README.md")
    assert len(cases) >= 5, f"{FOUND} holds the cases the campaigns found"
    for path in cases:
        check_found_case(path)
