"""What other readers need beside the shards (the OD API's label map and image key), and the
README's snippets for other readers, run against a real build."""

import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import build, decode, ilsvrc_image, jpeg_bytes, read_split, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tools import sample_tree, verify
from schemas import BUILD_INFO_FILE, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example
from schemas.label_map import LABEL_MAP_CSV_FILE, LABEL_MAP_FILE, label_map_csv, read_label_map
from schemas.tfrecord import read_records

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


def test_a_label_map_is_a_labels_file_in_id_order_with_its_display_names(
    od_build, tmp_path, capsys
):
    # The OD API's pascal_label_map.pbtxt (or a build's own) as --labels_file was read a line a
    # class: "lists these classes twice: ['id:', 'item', 'name:', '}']", and a one-item map
    # became the classes item, name:, id:, }.
    from beam_pipeline.tools import build as build_tool

    tree = tmp_path / "tree"
    ilsvrc_image(tree, "train", "t0", jpeg_bytes(), voc_xml([("n01443537", 2, 2, 30, 30)]))
    labels = write(
        tmp_path / "pascal_label_map.pbtxt",
        "item {\n  id: 2\n  name: 'n01443537'\n}\nitem {\n  name: \"n01440764\"\n  id: 1\n"
        "  display_name: 'tench'\n}\n",
    )
    info = build(tree, tmp_path / "out", "--splits", "train", "--labels_file", labels)
    assert info.classes == ("n01440764", "n01443537") and info.display_names == {
        "n01440764": "tench"
    }
    again = build(
        tree, tmp_path / "again", "--splits", "train", "--labels_file", od_build / LABEL_MAP_FILE
    )
    assert again.classes == ("n01440764", "n01443537", "n09999999")
    bad = write(tmp_path / "bad.pbtxt", "item {\n  name: 'cat'\n}\n")
    argv = [
        "--input_dir",
        tree,
        "--output_dir",
        tmp_path / "o",
        "--splits",
        "train",
        "--labels_file",
        bad,
    ]
    assert build_tool.main([str(a) for a in argv]) == 2
    assert (
        f"error: --labels_file {bad}: label map item 'name: \"cat\"' needs a name and an id of 1 "
        "or more (the OD API's 0 is the background, which the build adds itself)"
    ) in capsys.readouterr().err
    # A COCO-style map with gaps: renumbered without a word (ids 1, 2, 17 became 1, 2, 3).
    gaps = write(
        tmp_path / "coco.pbtxt",
        "item { name: 'n01443537' id: 17 }\nitem { name: 'n01440764' id: 2 }\n"
        "item { name: 'zebra' id: 1 }\n",
    )
    argv[-1], argv[3] = gaps, tmp_path / "gaps"
    assert build_tool.main([str(a) for a in argv]) == 0
    assert (
        "Note: --labels_file's ids (1, 2, 17) are not kept: the build numbers its 3 classes 0 to "
        "2 in id order (its label_map.pbtxt and label_map.csv: 1 to 3); a reader of the OD API's "
        "finds objects by their class text"
    ) in capsys.readouterr().err.splitlines()
    assert (tmp_path / "gaps" / "label_map.csv").read_text() == (
        "1,zebra\n2,n01440764\n3,n01443537\n"
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
    # A 1.1 record has neither the key nor 2.1's views; one with a view is checked as a 2.1
    # record (verify says once that the metadata's version is not the records').
    assert verify.check_example(old, 3, schema_version="1.1.0") == (
        "missing feature image/key/sha256"
    )
    del example.features.feature[F.OBJECT_VIEW]
    assert verify.check_example(example.SerializeToString(), 3, schema_version="1.1.0") is None
    example.features.feature["foo/bar"].int64_list.value.append(1)
    assert verify.check_example(example.SerializeToString(), 3, schema_version="1.1.0") == (
        "feature foo/bar is not in schema 1.1.0"
    )


def test_the_tensorflow_model_garden_decoder_reads_every_record(od_build):
    """The detection decoder of TensorFlow's Model Garden (`tf-models-official`'s
    `official.vision`, the OD API's TF2 successor), unmodified, on every record."""
    import tensorflow as tf
    from official.vision.dataloaders import tf_example_decoder

    decoder = tf_example_decoder.TfExampleDecoder()
    for split in ("train", "validation"):
        records = read_split(od_build, split)
        for record, serialized in zip(records, read_serialized(od_build, split), strict=True):
            decoded = {k: v.numpy() for k, v in decoder.decode(tf.constant(serialized)).items()}
            pixels = tf.io.decode_jpeg(record[F.ENCODED][0], channels=3).numpy()
            np.testing.assert_array_equal(decoded["image"], pixels)
            assert decoded["source_id"] == record[F.SOURCE_ID][0]
            assert (decoded["height"], decoded["width"]) == (
                record[F.HEIGHT][0],
                record[F.WIDTH][0],
            )
            assert decoded["groundtruth_classes"].tolist() == record[F.OBJECT_LABEL]
            keys = (F.BBOX_YMIN, F.BBOX_XMIN, F.BBOX_YMAX, F.BBOX_XMAX)
            expected = np.array([record[key] for key in keys], np.float32).T.reshape(-1, 4)
            np.testing.assert_array_equal(decoded["groundtruth_boxes"], expected)
            assert not decoded["groundtruth_is_crowd"].any()


def test_model_garden_s_label_map_decoder_gives_ids_from_1(od_build):
    """Model Garden's detectors take class 0 for background: its `TfExampleDecoderLabelMap`,
    given the build's `label_map.csv`, decodes each object's class as its label + 1."""
    import tensorflow as tf
    from official.vision.dataloaders import tf_example_label_map_decoder

    path = od_build / LABEL_MAP_CSV_FILE
    assert path.read_text() == "1,n01440764\n2,n01443537\n3,n09999999\n"
    decoder = tf_example_label_map_decoder.TfExampleDecoderLabelMap(label_map=str(path))
    records = read_split(od_build, "train")
    for record, serialized in zip(records, read_serialized(od_build, "train"), strict=True):
        decoded = decoder.decode(tf.constant(serialized))
        assert decoded["groundtruth_classes"].numpy().tolist() == [
            label + 1 for label in record[F.OBJECT_LABEL]
        ]
    assert label_map_csv(["a,b", 'say "hi"']) == '1,"a,b"\n2,"say ""hi"""\n'


def read_serialized(output_dir, split):
    """The serialized records of a split in written order."""
    info = DatasetInfo.from_json((output_dir / BUILD_INFO_FILE).read_text())
    records = []
    for shard in info.splits[split].shards:
        with open(output_dir / shard.file, "rb") as stream:
            records += list(read_records(stream))
    return records


def readme_blocks(
    section: str | None = None, page: str = "docs/other-readers.md"
) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of a documentation page, or of one section of it
    (these snippets were the README's; they moved to the docs site). Fails on none."""
    from test_docs import fenced_blocks

    return fenced_blocks(page, section)


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory):
    """A working directory where `sample_data/out` is a build of the sample generator."""
    tree = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(tree), num_train=40, num_val=10, seed=4)
    work = tmp_path_factory.mktemp("work")
    build(tree, work / "sample_data" / "out", "--num_shards", "train=2,val=1")
    return work


def test_the_readme_tensorflow_snippet_reads_the_first_record(sample_dir, monkeypatch):
    ((_, code),) = [b for b in readme_blocks("## Plain TensorFlow") if b[0] == "python"]
    monkeypatch.chdir(sample_dir)
    scope = {}
    exec(compile(code, "docs/other-readers.md", "exec"), scope)
    first = read_split(sample_dir / "sample_data" / "out", "train")[0]
    assert scope["label"].numpy() == first[F.LABEL][0]
    image, stored = scope["image"].numpy().astype(int), decode(first).astype(int)
    assert image.shape == stored.shape  # libjpeg's and Pillow's IDCTs differ by a few levels
    assert np.abs(image - stored).max() <= 8 and np.abs(image - stored).mean() < 1.5


def test_the_readme_pytorch_snippet_reads_without_tensorflow(sample_dir):
    ((_, code),) = [b for b in readme_blocks("## PyTorch") if b[0] == "python"]
    probe = (
        code
        + "\nimport json, sys\n"
        + "print(json.dumps({'shape': list(images.shape), 'labels': labels.tolist(),"
        + " 'tensorflow': 'tensorflow' in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=sample_dir, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    records = read_split(sample_dir / "sample_data" / "out", "train")
    assert got == {
        "shape": [32, 3, 64, 64],
        "labels": [r[F.LABEL][0] for r in records[:32]],
        "tensorflow": False,
    }


def test_the_readme_od_api_config_names_the_label_map_and_every_train_shard(sample_dir):
    (config,) = [code for language, code in readme_blocks() if language == "text"]
    label_map = re.search(r'label_map_path: "([^"]+)"', config).group(1)
    pattern = re.search(r'input_path: "([^"]+)"', config).group(1)
    out = sample_dir / "sample_data" / "out"
    assert read_label_map((sample_dir / label_map).read_text()) == {
        name: i + 1 for i, name in enumerate((out / "labels.txt").read_text().split())
    }
    matched = sorted(p.name for p in sample_dir.glob(pattern))
    assert matched == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]


@pytest.mark.slow
def test_the_readme_dali_snippet_reads_the_shards_on_the_cpu(sample_dir):
    ((_, code),) = [b for b in readme_blocks("## NVIDIA DALI") if b[0] == "python"]
    # DALI turns a JPEG by its EXIF orientation by default: away from its boxes and from what
    # every other reader gives (found by a new-user trial).
    assert "adjust_orientation=False" in code
    probe = (
        code
        + "\nimport json\n"
        + "print(json.dumps({'shape': list(images.as_tensor().shape()),"
        + " 'labels': [int(label[0]) for label in labels.as_array()]}))\n"
    )
    # tfrecord2idx is a script beside this interpreter, on PATH in an activated environment.
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=sample_dir,
        env={**os.environ, "PATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    records = read_split(sample_dir / "sample_data" / "out", "train")
    assert got == {"shape": [32, 64, 64, 3], "labels": [r[F.LABEL][0] for r in records[:32]]}
    assert not list((sample_dir / "sample_data" / "out").glob("*.idx"))  # indexes elsewhere


def test_the_readme_tfds_snippet_reads_a_build_as_a_tfds_dataset(sample_dir, monkeypatch):
    ((_, code),) = [b for b in readme_blocks("## TensorFlow Datasets") if b[0] == "python"]
    monkeypatch.chdir(sample_dir)
    scope = {}
    exec(compile(code, "docs/other-readers.md", "exec"), scope)
    out = sample_dir / "sample_data" / "out"
    first = read_split(out, "train")[0]
    assert scope["label"].numpy() == first[F.LABEL][0]
    assert scope["name"] == first[F.LABEL_TEXT][0].decode()
    assert scope["classes"].names == [*(out / "labels.txt").read_text().split(), "background"]
    assert scope["image"].numpy().shape == decode(first).shape
    record = read_split(out, "validation")[0]
    boxes = [scope["boxes"][i].numpy().tolist() for i in range(4)]
    keys = (F.BBOX_YMIN, F.BBOX_XMIN, F.BBOX_YMAX, F.BBOX_XMAX)
    assert boxes == [record[key] for key in keys]
