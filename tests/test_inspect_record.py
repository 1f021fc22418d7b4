"""`inspect`: one record of a shard as text or JSON, found by position or by file name.

The tree is a small bundled sample plus, in `val`, an image with two known objects (flags set),
in `train` an image of the same base name, and an unlabelled `test` split; the expected text is
spelled out line by line. In a build's directory, `inspect` finds records by file name over every
shard (an image of VOC's overlapping lists in each of its splits) and by position in a split.
"""

import hashlib
import io
import json
import shutil
import subprocess
import sys

import pytest
from helpers import build, ilsvrc_image, jpeg_bytes, read_split, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tools import inspect_record, sample_tree, show
from schemas import BUILD_INFO_FILE, FEATURES, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example
from schemas.tfrecord import encode_record, read_records

OBJECTS = [("circle", 10, 5, 49, 34, 1, 0), ("square", 60, 20, 99, 59, 0, 1)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tree = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(tree), num_train=20, num_val=6, seed=3)
    ilsvrc_image(tree, "val", "known", jpeg_bytes(100, 60), voc_xml(OBJECTS, (100, 60)))
    ilsvrc_image(tree, "train", "known", jpeg_bytes(30, 20))  # a negative of the same name
    for index in range(3):
        ilsvrc_image(tree, "test", f"t{index}", jpeg_bytes(40, 30, colour=(30 * index, 0, 0)))
    out = tmp_path_factory.mktemp("out")
    build(tree, out, "--splits", "train,val,test", "--num_shards", "train=2,val=1,test=1")
    return out


def shard(built, split, index=0):
    info = DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text())
    return built / info.splits[split].shards[index].file


def run(capsys, *argv):
    code = inspect_record.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def position_of(records, name):
    (index,) = [i for i, r in enumerate(records) if r[F.FILENAME][0].decode().endswith(name)]
    return index


def known_lines(path, index, count, data, names_from="class names from the build"):
    where = f" of {count} in split validation" if count else ""
    return [
        f"{path}: record {index}{where} ({names_from})",
        f"image/encoded: {len(data):,} bytes of JPEG, 100 wide x 60 high RGB, "
        f"sha256 {hashlib.sha256(data).hexdigest()}",
        "image/format: jpeg",
        "image/height: 60",
        "image/width: 100",
        "image/channels: 3",
        "image/filename: Data/DET/val/known.JPEG",
        "image/source_id: val/known",
        f"image/key/sha256: {hashlib.sha256(data).hexdigest()}",
        "image/class/label: 2 (square)",
        "image/class/text: square",
        "image/class/one_hot: [0, 0, 1, 0, 0]",
        "image/object/bbox/xmin: [0.1, 0.6]",
        "image/object/bbox/ymin: [0.083333336, 0.33333334]",
        "image/object/bbox/xmax: [0.49, 0.99]",
        "image/object/bbox/ymax: [0.56666666, 0.98333335]",
        "image/object/class/label: [0, 2]",
        'image/object/class/text: ["circle", "square"]',
        "image/object/difficult: [1, 0]",
        "image/object/truncated: [0, 1]",
        'image/object/view: ["", ""]',
        "objects: 2 (boxes [xmin, ymin, xmax, ymax], relative, then in pixels of the stored "
        "image, 100 wide x 60 high)",
        "  0: circle (label 0) box [0.1, 0.083333336, 0.49, 0.56666666] pixels [10, 5, 49, 34] "
        "difficult 1 truncated 0",
        "  1: square (label 2) box [0.6, 0.33333334, 0.99, 0.98333335] pixels [60, 20, 99, 59] "
        "difficult 0 truncated 1",
    ]


@pytest.mark.parametrize("name", ["known.JPEG", "val/known.JPEG", "Data/DET/val/known.JPEG"])
def test_a_known_record_by_file_name_prints_every_feature(built, capsys, name):
    path = shard(built, "validation")
    records = read_split(built, "validation")
    index = position_of(records, "/known.JPEG")
    code, out, err = run(capsys, path, "--filename", name)
    assert (code, err) == (0, "")
    data = records[index][F.ENCODED][0]
    assert out.splitlines() == known_lines(path, index, len(records), data)


def test_a_record_by_index_and_from_the_end(built, capsys):
    path = shard(built, "validation")
    records = read_split(built, "validation")
    index = position_of(records, "/known.JPEG")
    code, out, _ = run(capsys, path, "--index", index)
    assert code == 0 and out.splitlines() == known_lines(
        path, index, len(records), records[index][F.ENCODED][0]
    )
    code, out, _ = run(capsys, path, "--index", index - len(records))
    assert code == 0 and out.splitlines()[0].startswith(f"{path}: record {index} of ")
    code, out, _ = run(capsys, path)  # record 0 by default
    first = records[0][F.FILENAME][0].decode()
    assert code == 0 and f"image/filename: {first}" in out.splitlines()


def test_an_unlabelled_record_says_so(built, capsys):
    path = shard(built, "test")
    records = read_split(built, "test")
    code, out, _ = run(capsys, path, "--index", 2)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"{path}: record 2 of 3 in split test (class names from the build)"
    assert lines[1].startswith(
        f"image/encoded: {len(records[2][F.ENCODED][0]):,} bytes of JPEG, 40 wide x 30 high "
        "RGB, sha256 "
    )
    assert lines[6:] == [
        f"image/filename: {records[2][F.FILENAME][0].decode()}",
        f"image/source_id: {records[2][F.SOURCE_ID][0].decode()}",
        f"image/key/sha256: {hashlib.sha256(records[2][F.ENCODED][0]).hexdigest()}",
        "image/class/label: -1 (unlabelled)",
        'image/class/text: ""',
        "image/class/one_hot: [0, 0, 0, 0, 0]",
        *[f"{key}: []" for key in (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)],
        *[f"{key}: []" for key in (F.OBJECT_LABEL, F.OBJECT_TEXT)],
        *[f"{key}: []" for key in (F.OBJECT_DIFFICULT, F.OBJECT_TRUNCATED, F.OBJECT_VIEW)],
        "objects: 0 (boxes [xmin, ymin, xmax, ymax], relative, then in pixels of the stored "
        "image, 40 wide x 30 high)",
    ]


def test_json_summarises_the_image_and_names_the_objects(built, capsys):
    path = shard(built, "validation")
    records = read_split(built, "validation")
    index = position_of(records, "/known.JPEG")
    code, out, _ = run(capsys, path, "--filename", "known.JPEG", "--json")
    assert code == 0
    payload = json.loads(out)
    data = records[index][F.ENCODED][0]
    assert payload["shard"] == str(path) and payload["index"] == index
    assert (payload["split"], payload["num_records"]) == ("validation", len(records))
    assert payload["class_names_from"] == "build"
    features = payload["features"]
    assert list(features) == [f.key for f in FEATURES]
    assert features[F.ENCODED] == [
        {
            "format": "JPEG",
            "num_bytes": len(data),
            "width": 100,
            "height": 60,
            "mode": "RGB",
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    ]
    assert len(out) < 3000  # the bytes are summarised, never printed
    assert features[F.FILENAME] == ["Data/DET/val/known.JPEG"]
    assert features[F.BBOX_XMIN] == [0.1, 0.6] and features[F.OBJECT_TEXT] == ["circle", "square"]
    assert payload["label"] == {"id": 2, "name": "square"}
    assert payload["size"] == [100, 60] and payload["missing"] == []
    assert payload["objects"] == [
        {
            "label": 0,
            "name": "circle",
            "text": "circle",
            "box": [0.1, 0.083333336, 0.49, 0.56666666],
            "box_pixels": [10, 5, 49, 34],
            "difficult": 1,
            "truncated": 0,
        },
        {
            "label": 2,
            "name": "square",
            "text": "square",
            "box": [0.6, 0.33333334, 0.99, 0.98333335],
            "box_pixels": [60, 20, 99, 59],
            "difficult": 0,
            "truncated": 1,
        },
    ]


def test_a_shard_alone_takes_its_class_names_from_the_record(built, tmp_path, capsys):
    alone = tmp_path / "alone.tfrecord"
    shutil.copy(shard(built, "validation"), alone)
    records = read_split(built, "validation")
    index = position_of(records, "/known.JPEG")
    code, out, _ = run(capsys, alone, "--filename", "known.JPEG")
    data = records[index][F.ENCODED][0]
    expected = known_lines(alone, index, None, data, "class names from the record")
    assert code == 0 and out.splitlines() == expected
    code, out, _ = run(capsys, alone, "--filename", "known.JPEG", "--json")
    payload = json.loads(out)
    assert (payload["split"], payload["num_records"]) == (None, None)
    assert payload["class_names_from"] == "record" and payload["label"]["name"] == "square"


def test_a_file_name_no_record_has_exits_1_naming_what_was_searched(built, capsys):
    path = shard(built, "validation")
    count = len(read_split(built, "validation"))
    code, out, err = run(capsys, path, "--filename", "nope.JPEG")
    assert (code, out) == (1, "")
    assert err == (
        f"error: no record of {path} has image/filename nope.JPEG or .../nope.JPEG "
        f"(searched {count} records)"
    )
    # A suffix must be whole path components: "nown.JPEG" is not "known.JPEG".
    assert run(capsys, path, "--filename", "nown.JPEG")[0] == 1


@pytest.mark.parametrize("index", [3, -4, 99])
def test_an_index_out_of_range_exits_2_with_the_count(built, capsys, index):
    path = shard(built, "test")
    code, out, err = run(capsys, path, "--index", index)
    assert (code, out) == (2, "")
    assert err == (
        f"error: --index {index} is out of range: {path} has 3 records (0..2, or -3..-1 from "
        "the end)"
    )


def test_a_corrupt_shard_exits_1_with_the_frame_error(built, tmp_path, capsys):
    corrupt = tmp_path / "corrupt.tfrecord"
    data = bytearray(shard(built, "test").read_bytes())
    data[12 + 30] ^= 0x01  # inside record 0's data
    corrupt.write_bytes(bytes(data))
    code, out, err = run(capsys, corrupt)
    assert (code, out) == (1, "")
    assert err == f"error: {corrupt} is corrupt: record 0 at byte 0: data checksum mismatch"


@pytest.mark.parametrize("data", [b"hello world", b"\xff\xd8\xff\xe0 a JPEG, say: no record"])
def test_a_file_that_is_no_tfrecord_is_said_to_be_none(tmp_path, capsys, data):
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    code, out, err = run(capsys, path)
    assert (code, out) == (1, "")
    problem = (
        "truncated length header"
        if len(data) < 12
        else "length checksum mismatch at the file's start (is it a TFRecord file?)"
    )
    assert err == (
        f"error: {path} is not a TFRecord file (record 0 at byte 0: {problem}): inspect reads "
        "a shard of a build (NAME.tfrecord) or the build's directory"
    )


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_a_shard_whose_first_bytes_are_damaged_is_said_corrupt(built, tmp_path, capsys, damage):
    data = bytearray(shard(built, "test").read_bytes())
    data = data[:7] if damage == "cut" else data[:1] + bytes([data[1] ^ 0x01]) + data[2:]
    corrupt = tmp_path / "test-00000-of-00001.tfrecord"
    corrupt.write_bytes(bytes(data))
    code, out, err = run(capsys, corrupt)
    problem = "truncated length header" if damage == "cut" else "length checksum mismatch"
    assert (code, out) == (1, "")
    assert err.startswith(f"error: {corrupt} is corrupt: record 0 at byte 0: {problem}")


def test_a_record_that_is_no_example_or_no_image_is_named(built, tmp_path, capsys):
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(encode_record(b"\xff\xff\xff not a protobuf"))
    code, _, err = run(capsys, garbage)
    assert code == 1 and err == f"error: {garbage} record 0 is not a tf.train.Example (DecodeError)"
    example = Example()
    example.features.feature[F.ENCODED].bytes_list.value.append(b"GIF89a" + b"\0" * 20)
    example.features.feature["extra/key"].int64_list.value.extend([7, 8])
    odd = tmp_path / "odd.tfrecord"
    odd.write_bytes(encode_record(example.SerializeToString()))
    code, out, _ = run(capsys, odd)
    lines = out.splitlines()
    assert code == 0
    assert lines[1].startswith("image/encoded: 26 bytes of GIF, does not decode (")
    assert "extra/key: [7, 8]  (not in the schema)" in lines
    assert f"{F.LABEL}: (missing)" in lines and f"{F.FILENAME}: (missing)" in lines


def test_a_label_outside_the_build_s_is_said_to_be(built, tmp_path, capsys):
    # Label 99 of a 5-class build was printed "99 (background)", the record's own text.
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    path = copy / shard(built, "validation").name
    records = list(read_records(io.BytesIO(path.read_bytes())))
    example = Example.FromString(records[0])
    example.features.feature[F.LABEL].int64_list.value[0] = 99
    records[0] = example.SerializeToString()
    path.write_bytes(b"".join(encode_record(r) for r in records))
    code, out, _ = run(capsys, path, "--index", "0")
    names = len(DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text()).class_list.names)
    assert code == 0
    assert f"{F.LABEL}: 99 (outside the build's {names} labels: run verify)" in out.splitlines()


def test_split_with_a_path_that_is_no_build_says_what_it_is(tmp_path, capsys):
    # Both were told "is one shard file: drop --split".
    code, _, err = run(capsys, tmp_path / "none", "--split", "train")
    assert (code, err) == (
        2,
        f"error: {tmp_path / 'none'} does not exist: --split reads a build's directory",
    )
    write(tmp_path / "notes.txt", "text")
    code, _, err = run(capsys, tmp_path / "notes.txt", "--split", "train")
    assert (code, err) == (
        2,
        f"error: {tmp_path / 'notes.txt'} is a file, not a build: --split reads a build's "
        "directory",
    )


def test_missing_shards_and_directories_exit_2(built, tmp_path, capsys):
    code, _, err = run(capsys, tmp_path / "none.tfrecord")
    assert code == 2 and err == f"error: {tmp_path / 'none.tfrecord'} does not exist"
    code, _, err = run(capsys, built)
    assert code == 2
    assert err == (
        f"error: {built} is a directory; name one shard file, e.g. {shard(built, 'test')}, or "
        "find a record of its build: --filename NAME, or --split SPLIT --index N"
    )
    with pytest.raises(SystemExit) as exit_info:
        inspect_record.main([str(shard(built, "test")), "--index", "0", "--filename", "t0.JPEG"])
    assert exit_info.value.code == 2


def test_the_module_runs_alone(built):
    path = shard(built, "test")
    result = subprocess.run(
        [sys.executable, "-m", "beam_pipeline.tools.inspect_record", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["label"] == {"id": -1, "name": "unlabelled"}


# --- a build's directory ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["val/known.JPEG", "Data/DET/val/known.JPEG"])
def test_a_build_finds_a_file_name_in_its_shards(built, capsys, name):
    path = shard(built, "validation")
    records = read_split(built, "validation")
    index = position_of(records, "val/known.JPEG")
    data = records[index][F.ENCODED][0]
    code, out, err = run(capsys, built, "--filename", name)
    assert (code, err) == (0, "")
    names_from = f"the split's record {index} of {len(records)}; class names from the build"
    assert out.splitlines() == known_lines(path, index, len(records), data, names_from)
    # --split narrows the search: the base name alone is then one file's.
    code, out, _ = run(capsys, built, "--split", "validation", "--filename", "known.JPEG")
    assert code == 0 and out.splitlines() == known_lines(
        path, index, len(records), data, names_from
    )


def test_a_base_name_several_files_end_with_lists_them_and_exits_2(built, capsys):
    code, out, err = run(capsys, built, "--filename", "known.JPEG")
    assert (code, out) == (2, "")
    assert err == (
        f"error: 2 files of the build in {built} end with /known.JPEG: Data/DET/train/known.JPEG "
        "(train), Data/DET/val/known.JPEG (validation); name one by more of its path, e.g. "
        "--filename Data/DET/train/known.JPEG"
    )


def test_the_suggested_file_name_is_quoted_for_the_shell(tmp_path, capsys):
    for split in ("train", "val"):
        for name in ("Golden Retriever", "pug"):
            write(tmp_path / "photos" / split / name / "0.jpg", jpeg_bytes())
    build(tmp_path / "photos", tmp_path / "out")
    code, _, err = run(capsys, tmp_path / "out", "--filename", "0.jpg")
    assert code == 2 and err.endswith("e.g. --filename 'train/Golden Retriever/0.jpg'")


def test_a_file_name_no_record_of_the_build_has_names_what_was_searched(built, capsys):
    counts = {split: len(read_split(built, split)) for split in ("test", "train", "validation")}
    code, out, err = run(capsys, built, "--filename", "nope.JPEG")
    assert (code, out) == (1, "")
    assert err == (
        f"error: no record of the build in {built} has image/filename nope.JPEG or .../nope.JPEG "
        f"(searched {sum(counts.values())} records: test 3, train {counts['train']}, validation "
        f"{counts['validation']})"
    )
    code, _, err = run(capsys, built, "--split", "test", "--filename", "known.JPEG")
    assert code == 1 and err.endswith("(searched 3 records: test 3)")


def test_a_split_and_index_read_the_record_of_that_position(built, capsys):
    records = read_split(built, "train")
    info = DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text())
    first, second = info.splits["train"].shards
    assert second.num_examples > 0
    for position in (first.num_examples + 1, -1):
        wanted = position % len(records)
        path = built / records[wanted]["_shard"]
        holder = second if path.name == second.file else first
        in_shard = wanted - (first.num_examples if holder is second else 0)
        code, out, err = run(capsys, built, "--split", "train", "--index", position)
        assert (code, err) == (0, "")
        lines = out.splitlines()
        assert lines[0] == (
            f"{path}: record {in_shard} of {holder.num_examples} in split train (the split's "
            f"record {wanted} of {len(records)}; class names from the build)"
        )
        alone = run(capsys, path, "--index", in_shard)[1].splitlines()
        assert lines[1:] == alone[1:]
        assert f"image/filename: {records[wanted][F.FILENAME][0].decode()}" in lines
    # --split alone: its record 0.
    code, out, _ = run(capsys, built, "--split", "test")
    assert code == 0 and out.splitlines()[0].startswith(
        f"{shard(built, 'test')}: record 0 of 3 in split test (the split's record 0 of 3; "
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--split", "test", "--index", "3"],
            "--index 3 is out of range: split test of {out} has 3 records (0..2, or -3..-1 from "
            "the end)",
        ),
        (
            ["--index", "3"],
            "--index in a build's directory needs --split (the splits of {out}: test, train, "
            "validation), or name one shard file",
        ),
        (
            ["--split", "val", "--index", "0"],
            "no split 'val' in {out}; its splits are test, train, validation; did you mean "
            "--split validation?",
        ),
    ],
)
def test_a_split_or_index_the_build_lacks_exits_2(built, capsys, argv, message):
    code, out, err = run(capsys, built, *argv)
    assert (code, out, err) == (2, "", f"error: {message.format(out=built)}")


def test_split_with_a_shard_file_and_a_directory_without_a_build_exit_2(built, tmp_path, capsys):
    path = shard(built, "test")
    code, _, err = run(capsys, path, "--split", "test")
    assert code == 2
    assert err == (
        f"error: --split finds a record in a build's directory; {path} is one shard file: drop "
        f"--split, or name its directory ({built})"
    )
    code, _, err = run(capsys, tmp_path, "--filename", "known.JPEG")
    assert code == 2
    assert err.startswith(
        f"error: {tmp_path} holds no committed build (build_info.json is missing)"
    )
    # Shards without their build's metadata (a build that stopped): said so; read by name only.
    shutil.copy(path, tmp_path / path.name)
    code, _, err = run(capsys, tmp_path, "--filename", "known.JPEG")
    assert code == 2
    assert err == (
        f"error: {tmp_path} holds no committed build (build_info.json is missing); to read one "
        f"of its uncommitted shards, name the file, e.g. {tmp_path / path.name}"
    )
    # An input tree is named as one, as stats, show and verify name it.
    (tmp_path / "tree" / "Data").mkdir(parents=True)
    code, _, err = run(capsys, tmp_path / "tree")
    assert code == 2
    assert err == (
        f"error: {tmp_path}/tree is an input tree (it holds Data/), not a build: build it first "
        f"(python -m beam_pipeline --input_dir {tmp_path}/tree --output_dir OUT) and read OUT"
    )


def test_a_damaged_build_names_the_shard_and_verify(built, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    test_shard = copy / shard(built, "test").name
    data = bytearray(test_shard.read_bytes())
    data[12 + 30] ^= 0x01  # inside record 0's data
    test_shard.write_bytes(bytes(data))
    code, out, err = run(capsys, copy, "--filename", "nope.JPEG")
    assert (code, out) == (1, "")
    assert err == (
        f"error: {test_shard} is corrupt: record 0 at byte 0: data checksum mismatch; run "
        f"python -m beam_pipeline verify {copy}"
    )
    test_shard.unlink()
    code, _, err = run(capsys, copy, "--split", "test", "--index", "1")
    assert code == 1
    assert err == (
        f"error: {test_shard} is missing: the build in {copy} is damaged; run python -m "
        f"beam_pipeline verify {copy}"
    )


def test_a_shard_of_another_size_is_named_not_read_as_the_build_s(built, tmp_path, capsys):
    # Another split's shard copied in place of validation's was printed as validation's
    # record 0, exit 0; one cut at a record boundary made `show` draw fewer, exit 0.
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    validation, train = copy / shard(built, "validation").name, shard(built, "train")
    validation.write_bytes(train.read_bytes())
    sizes = (train.stat().st_size, shard(built, "validation").stat().st_size)
    code, out, err = run(capsys, copy, "--split", "validation", "--index", "0")
    assert (code, out) == (1, "")
    assert err == (
        f"error: {validation} has {sizes[0]:,} bytes, build_info.json says {sizes[1]:,}: it is "
        f"not the shard the build wrote (cut, replaced or swapped); run python -m beam_pipeline "
        f"verify {copy}"
    )
    code, _, err = run(capsys, copy, "--filename", "nope.JPEG")
    assert code == 1 and err.startswith(f"error: {validation} has {sizes[0]:,} bytes")
    assert show.main([str(copy), "--split", "validation", "-o", str(tmp_path / "s.png")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {validation} has {sizes[0]:,} bytes")
    assert not (tmp_path / "s.png").exists()


def test_a_shard_short_of_its_count_with_its_size_recorded_is_named(built, tmp_path, capsys):
    # Cut at a record boundary and its size and digest written into build_info.json: `show`
    # drew what the shard held and nothing of the shards after it, exit 0.
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    path = shard(copy, "train")
    records = list(read_records(io.BytesIO(path.read_bytes())))
    path.write_bytes(b"".join(encode_record(r) for r in records[:-1]))
    payload = json.loads((copy / BUILD_INFO_FILE).read_text())
    first = payload["splits"]["train"]["shards"][0]
    first["num_bytes"] = path.stat().st_size
    first["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / BUILD_INFO_FILE).write_text(json.dumps(payload))
    said = (
        f"error: {path} holds {len(records) - 1} records, build_info.json counts "
        f"{len(records)}: it is not the shard the build wrote; run python -m beam_pipeline "
        f"verify {copy}\n"
    )
    total = payload["splits"]["train"]["num_examples"]
    assert (
        show.main([str(copy), "--split", "train", "-n", str(total), "-o", str(tmp_path / "s.png")])
        == 1
    )
    assert capsys.readouterr().err == said
    assert not (tmp_path / "s.png").exists()
    code, _, err = run(capsys, copy, "--split", "train", "--index", str(len(records) - 1))
    assert (code, err) == (1, said.rstrip("\n"))


def test_a_record_that_is_no_example_with_its_checksums_intact_is_named(built, tmp_path, capsys):
    # Its CRCs recomputed, the shard's size and digest recorded: `show` ended in protobuf's
    # DecodeError traceback (inspect named it).
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    path = shard(copy, "train")
    records = list(read_records(io.BytesIO(path.read_bytes())))
    records[0] = b"\xff\xf5 not a tf.train.Example"
    path.write_bytes(b"".join(encode_record(r) for r in records))
    payload = json.loads((copy / BUILD_INFO_FILE).read_text())
    first = payload["splits"]["train"]["shards"][0]
    first["num_bytes"] = path.stat().st_size
    first["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / BUILD_INFO_FILE).write_text(json.dumps(payload))
    said = f"error: {path} record 0 is not a tf.train.Example (DecodeError)\n"
    name = json.loads((copy / BUILD_INFO_FILE).read_text())["classes"][0]
    for how in (["-n", "50"], ["--class", name]):
        assert show.main([str(copy), "--split", "train", *how, "-o", str(tmp_path / "s.png")]) == 1
        assert capsys.readouterr().err == said
    assert not (tmp_path / "s.png").exists()


@pytest.fixture(scope="module")
def voc_build(tmp_path_factory):
    """VOC2007 with overlapping lists: 000005 in train and trainval, 000009 in val and trainval."""
    year = tmp_path_factory.mktemp("voc") / "VOC2007"
    lists = {"train": ["000005", "000007"], "val": ["000009"], "trainval": ["000005", "000007"]}
    lists["trainval"].append("000009")
    for name, ids in lists.items():
        write(year / "ImageSets/Main" / f"{name}.txt", "".join(f"{i}\n" for i in ids))
    for stem, name in (("000005", "dog"), ("000007", "cat"), ("000009", "dog")):
        write(year / "JPEGImages" / f"{stem}.jpg", jpeg_bytes())
        write(year / "Annotations" / f"{stem}.xml", voc_xml([(name, 1, 1, 30, 30)]))
    out = tmp_path_factory.mktemp("voc_out")
    build(year, out, "--splits", "train,val,trainval")
    return out


def test_an_image_in_several_splits_is_shown_in_each(voc_build, capsys):
    code, out, err = run(capsys, voc_build, "--filename", "000005.jpg")
    assert (code, err) == (0, "")
    blocks = out.split("\n\n")
    assert blocks[0] == (
        "2 records have image/filename JPEGImages/000005.jpg, in splits train, trainval"
    )
    assert len(blocks) == 3
    for block, split in zip(blocks[1:], ("train", "trainval"), strict=True):
        records = read_split(voc_build, split)
        index = position_of(records, "/000005.jpg")
        lines = block.splitlines()
        assert lines[0] == (
            f"{voc_build / records[index]['_shard']}: record {index} of {len(records)} in split "
            f"{split} (the split's record {index} of {len(records)}; class names from the build)"
        )
        assert "image/filename: JPEGImages/000005.jpg" in lines
        assert "image/class/label: 1 (dog)" in lines
    code, out, _ = run(capsys, voc_build, "--filename", "000005.jpg", "--json")
    payloads = json.loads(out)
    assert code == 0 and [p["split"] for p in payloads] == ["train", "trainval"]
    for payload in payloads:
        records = read_split(voc_build, payload["split"])
        assert payload["split_records"] == len(records)
        assert payload["split_position"] == position_of(records, "/000005.jpg")
        assert payload["features"][F.FILENAME] == ["JPEGImages/000005.jpg"]
    # --split --index prints one object, not a list.
    code, out, _ = run(capsys, voc_build, "--split", "validation", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["split"] == "validation" and payload["split_position"] == 0


def test_a_blank_filename_is_refused_as_a_bad_flag(tmp_path, capsys):
    # --filename '' searched every shard for it and exited 1 (a CLI fuzz trial).
    with pytest.raises(SystemExit) as exited:
        inspect_record.main([str(tmp_path), "--filename", " "])
    assert exited.value.code == 2
    assert capsys.readouterr().err.endswith("error: argument --filename: is blank: name it\n")
