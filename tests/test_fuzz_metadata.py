"""Property tests (Hypothesis) over a build's metadata: `build_info.json` edited at random
(a field deleted, of another kind or value, a list cut; the text cut or a character changed),
read by the commands' reader, the loader's and the commands, with the invariants of
`benchmarks.fuzz_metadata`. `tests/test_build_info_damage.py` holds the cases found so far.
"""

from __future__ import annotations

import json
import math

import pytest
from helpers import Seed
from hypothesis import event, given
from hypothesis import strategies as st

from benchmarks.fuzz_metadata import build_copy, check_metadata_invariants, mutated, paths
from benchmarks.fuzz_records import seed_build
from schemas import BUILD_INFO_FILE

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-3, 12)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["2.1.0", "3.0.0", "1.0.0", "train", "n01", "background", ""]),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = seed_build(tmp_path_factory.mktemp("seed"))
    return Seed((out, json.loads((out / BUILD_INFO_FILE).read_text())))


@st.composite
def edited_metadata(draw, payload: dict) -> str:
    """The seed's metadata edited one to three times as JSON, then perhaps as text."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(payload)))
        change = draw(st.sampled_from(["delete", "replace", "replace", "cut"]))
        payload = mutated(payload, list(path), change, draw(JSON_VALUES))
    text = json.dumps(payload, indent=draw(st.sampled_from([None, 2])))
    edit = draw(st.sampled_from(["none", "none", "none", "cut", "character"]))
    if edit == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    elif edit == "character" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.characters()) + text[at + 1 :]
    return text


@given(data=st.data())
def test_every_reader_reads_edited_metadata_or_names_it_damaged(seed, data, tmp_path_factory):
    out, payload = seed
    text = data.draw(edited_metadata(payload))
    copy = build_copy(out, tmp_path_factory.getbasetemp() / "edited" / "build", text)
    event(check_metadata_invariants(copy))


def test_the_seed_metadata_reads_everywhere(seed, tmp_path):
    out, payload = seed
    copy = build_copy(out, tmp_path / "build", json.dumps(payload))
    assert check_metadata_invariants(copy) == "read"


def test_bytes_that_are_not_utf8_are_named_damaged_by_both_readers(seed, tmp_path):
    # Atheris's (`fuzz_campaign metadata`): two bytes of a key changed to 0x97 0x9c.
    out, payload = seed
    data = json.dumps(payload).encode().replace(b"per_image", b"per_\x97\x9cage")
    copy = build_copy(out, tmp_path / "build", data)
    assert b"objects_per_\x97\x9cage" in (copy / BUILD_INFO_FILE).read_bytes()
    assert check_metadata_invariants(copy) == "damaged"


@pytest.mark.parametrize(
    "path, value",
    [
        (("splits", "train", "num_examples"), math.nan),
        (("splits", "train", "shards", 0, "num_bytes"), 2**70),
        (("classes",), {"n01": 0}),
    ],
)
def test_values_of_other_kinds_are_named_damaged(seed, tmp_path, path, value):
    out, payload = seed
    text = json.dumps(mutated(payload, list(path), "replace", value))
    assert check_metadata_invariants(build_copy(out, tmp_path / "build", text)) == "damaged"
