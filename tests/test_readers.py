"""What other readers need beside the shards: the OD API's label map and image key."""

import hashlib

import pytest
from helpers import build, ilsvrc_image, jpeg_bytes, read_split, write

from beam_pipeline import verify
from beam_pipeline.annotations import voc_xml
from schemas import features as F
from schemas.example_proto import Example
from schemas.label_map import LABEL_MAP_FILE, read_label_map

SYNSETS = {"n01440764": "tench, Tinca tinca", "n01443537": "goldfish, Carassius auratus"}


@pytest.fixture(scope="module")
def od_build(tmp_path_factory):
    """A DET tree of both classes (class 0 included), built with a LOC_synset_mapping file."""
    root = tmp_path_factory.mktemp("det")
    names = list(SYNSETS)
    for n in range(6):
        objects = [(names[n % 2], 2, 2, 30, 30)] + ([(names[0], 40, 5, 60, 40)] if n < 2 else [])
        ilsvrc_image(root, "train", f"t{n}", jpeg_bytes(), voc_xml(objects, size=(64, 48)))
        ilsvrc_image(root, "val", f"v{n}", jpeg_bytes(), voc_xml(objects, size=(64, 48)))
    mapping = "".join(f"{s} {d}\n" for s, d in SYNSETS.items()) + "n09999999\n"
    labels = write(root.parent / "LOC_synset_mapping.txt", mapping)
    out = tmp_path_factory.mktemp("out")
    build(root, out, "--labels_file", labels)
    return out


def test_the_label_map_gives_ids_from_1_in_class_order_with_display_names(od_build):
    text = (od_build / LABEL_MAP_FILE).read_text()
    assert read_label_map(text) == {"n01440764": 1, "n01443537": 2, "n09999999": 3}
    assert text == (
        'item {\n  name: "n01440764"\n  id: 1\n  display_name: "tench, Tinca tinca"\n}\n'
        'item {\n  name: "n01443537"\n  id: 2\n  display_name: "goldfish, Carassius auratus"\n}\n'
        'item {\n  name: "n09999999"\n  id: 3\n}\n'
    )


def test_the_od_api_decoder_logic_finds_every_object_with_a_nonzero_id(od_build):
    """As the OD API's TfExampleDecoder with a label map: ids looked up by object class text;
    0 (its background) never comes out, and each id is the record's own label + 1."""
    ids = read_label_map((od_build / LABEL_MAP_FILE).read_text())
    seen = 0
    for split in ("train", "validation"):
        for record in read_split(od_build, split):
            texts = [t.decode() for t in record[F.OBJECT_TEXT]]
            looked_up = [ids.get(t, -1) for t in texts]
            assert looked_up == [label + 1 for label in record[F.OBJECT_LABEL]]
            assert all(i >= 1 for i in looked_up)
            seen += len(texts)
            digest = hashlib.sha256(record[F.ENCODED][0]).hexdigest().encode()
            assert record[F.KEY_SHA256] == [digest]
    assert seen == 16  # 6 + 2 objects per split, class 0's included


def test_verify_checks_the_key_and_reads_builds_older_than_the_key(od_build):
    assert verify.verify(str(od_build)) == (2, [])
    (record,) = [r for r in read_split(od_build, "train")][:1]
    example = Example()
    for key, values in record.items():
        if key == "_shard":
            continue
        kind = F.FEATURES_BY_KEY[key].proto_kind
        getattr(example.features.feature[key], kind).value.extend(values)
    good = example.SerializeToString()
    assert verify.check_example(good, 3) is None
    example.features.feature[F.KEY_SHA256].bytes_list.value[0] = b"0" * 64
    assert verify.check_example(example.SerializeToString(), 3) == (
        "image/key/sha256 is not the SHA-256 of the image bytes"
    )
    del example.features.feature[F.KEY_SHA256]
    old = example.SerializeToString()
    assert verify.check_example(old, 3) == "missing feature image/key/sha256"
    assert verify.check_example(old, 3, schema_version="1.1.0") is None
