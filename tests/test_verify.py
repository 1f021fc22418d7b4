import io
import json
import shutil
import struct

import pytest
from helpers import build, build_sample, jpeg_bytes, png_bytes

from beam_pipeline.tools import commands, sample_tree, upgrade, verify
from schemas import BUILD_INFO_FILE, DamagedBuildError, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example
from schemas.tfrecord import encode_record, read_records


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_sample(tmp_path_factory, 24, 8, seed=2, num_shards="train=3,val=1")


@pytest.fixture
def copy(built, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(built, target)
    return target


def shard_of(out, index=1):
    info = DatasetInfo.from_json((out / BUILD_INFO_FILE).read_text())
    return out / info.splits["train"].shards[index].file


def record_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12 + length + 4
    return offsets


def run(out, capsys, *flags):
    code = verify.main([str(out), "--workers", "1", *flags])
    return code, capsys.readouterr().out


def test_a_clean_build_verifies(built, capsys):
    code, output = run(built, capsys)
    assert code == 0 and output.strip() == "OK: 4 shards verified"
    assert verify.main([str(built), "--workers", "2"]) == 0
    for workers in ("0", "-1", "100000"):  # (were taken: 0 and -1 as one, 100000 as asked)
        with pytest.raises(SystemExit) as exited:
            verify.main([str(built), "--workers", workers])
        assert exited.value.code == 2
        assert f"error: --workers {workers}: give 1 to " in capsys.readouterr().err


def test_work_folders_a_commit_left_are_noted_and_upgrade_removes_them(copy, capsys):
    # A build killed after its last file (TFDS's) and before it removed its work folders is
    # whole, but a rerun is refused as complete: verify said OK without a word of them.
    (copy / ".progress").mkdir()
    (copy / ".progress" / "train-00000-of-00003.tfrecord.json").write_text("{}")
    (copy / ".tmp" / "live").mkdir(parents=True)
    code, output = run(copy, capsys)
    assert code == 0 and output.splitlines() == [
        "OK: 4 shards verified",
        # (Not "after its commit": a rebuild killed before its commit leaves them too.)
        f"note: .tmp/, .progress/: work folders a build left when it stopped (the build "
        f"verified is whole); python -m beam_pipeline upgrade {copy} removes them, or a "
        "rebuild with --overwrite",
    ]
    assert upgrade.main([str(copy)]) == 0
    assert not (copy / ".progress").exists() and not (copy / ".tmp").exists()
    capsys.readouterr()
    assert run(copy, capsys) == (0, "OK: 4 shards verified\n")
    (copy / ".tmp").write_text("a file in its place: upgrade ended in a FileExistsError")
    assert upgrade.main([str(copy)]) == 2
    assert capsys.readouterr().err == (
        f"error: {copy}/.tmp is a file, not a work folder of the build: delete it, then rerun "
        "upgrade\n"
    )


def test_flipped_byte_is_located(copy, capsys):
    shard = shard_of(copy)
    data = bytearray(shard.read_bytes())
    start = record_offsets(bytes(data))[3]
    data[start + 12 + 50] ^= 0x01  # inside record 3's data
    shard.write_bytes(bytes(data))
    code, output = run(copy, capsys)
    assert code == 1
    assert f"FAIL {shard.name} record 3: data checksum mismatch (byte {start})" in output
    assert "1 problem in 1 file (4 shards checked)" in output


def test_flipped_length_is_located(copy, capsys):
    shard = shard_of(copy)
    data = bytearray(shard.read_bytes())
    start = record_offsets(bytes(data))[2]
    data[start + 1] ^= 0x40
    shard.write_bytes(bytes(data))
    assert f"{shard.name} record 2: length checksum mismatch" in run(copy, capsys)[1]


def test_truncated_shard_is_located(copy, capsys):
    shard = shard_of(copy)
    data = shard.read_bytes()
    start = record_offsets(data)[5]
    shard.write_bytes(data[: start + 40])
    code, output = run(copy, capsys)
    assert code == 1 and f"{shard.name} record 5: truncated record data" in output


def test_deleted_shard_is_reported(copy, capsys):
    shard = shard_of(copy, 0)
    shard.unlink()
    assert f"FAIL {shard.name}: missing" in run(copy, capsys)[1]


def test_valid_frame_with_a_broken_image_is_located(copy, capsys):
    shard = shard_of(copy)
    records = list(read_records(io.BytesIO(shard.read_bytes())))
    example = Example.FromString(records[4])
    encoded = example.features.feature[F.ENCODED].bytes_list
    encoded.value[0] = encoded.value[0][: len(encoded.value[0]) // 3]
    records[4] = example.SerializeToString(deterministic=True)
    shard.write_bytes(b"".join(encode_record(r) for r in records))
    code, output = run(copy, capsys)
    assert code == 1
    assert f"{shard.name} record 4: image does not decode" in output
    output = run(copy, capsys, "--no_decode")[1]  # the record's image digest, the shard's size
    assert f"FAIL {shard.name} record 4: image/key/sha256 is not the SHA-256" in output
    assert output.strip().endswith("2 problems in 1 file (4 shards checked)")


def _replace_images(shard, changes):
    """Rewrites the shard with each record index's image bytes changed by its function."""
    records = list(read_records(io.BytesIO(shard.read_bytes())))
    for index, change in changes.items():
        example = Example.FromString(records[index])
        encoded = example.features.feature[F.ENCODED].bytes_list
        encoded.value[0] = change(encoded.value[0])
        records[index] = example.SerializeToString(deterministic=True)
    shard.write_bytes(b"".join(encode_record(r) for r in records))


def test_every_bad_record_is_named_with_a_count_per_shard(copy, capsys):
    # From a new-user trial: two records were bad, verify named the first of the shard only.
    # A JPEG whose data goes on after its scan ended decodes in Pillow (garbled where damaged),
    # not in libjpeg-turbo strictly: what an older build kept, a reader may fail on.
    first, second = shard_of(copy, 1), shard_of(copy, 2)
    _replace_images(
        first,
        {
            1: lambda data: data[: len(data) // 3],
            4: lambda data: data[:-2] + bytes(40) + b"\xff\xd9",
        },
    )
    # A PNG in a record was "image does not decode (UnidentifiedImageError: cannot identify
    # image file <_io.BytesIO object at 0x...>)" (a reader trial).
    _replace_images(second, {0: lambda data: data[: len(data) // 2], 2: lambda _: png_bytes()})
    code, output = run(copy, capsys)
    assert code == 1
    assert f"FAIL {first.name} record 1: image does not decode" in output
    assert f"FAIL {first.name} record 4: image data is damaged (JPEG: Corrupt JPEG data: " in output
    assert "extraneous bytes before marker 0xd9" in output
    assert f"FAIL {second.name} record 0: image does not decode" in output
    assert f"FAIL {second.name} record 2: image is a PNG, not a JPEG" in output
    assert f"  {first.name}: 3 problems\n  {second.name}: 3 problems\n" in output  # + size
    assert output.strip().endswith("6 problems in 2 files (4 shards checked)")


def test_wrong_label_and_missing_record_are_reported(copy, capsys):
    shard = shard_of(copy)
    records = list(read_records(io.BytesIO(shard.read_bytes())))
    example = Example.FromString(records[0])
    label = example.features.feature[F.LABEL].int64_list.value
    label[0] = (label[0] + 1) % 5
    records[0] = example.SerializeToString(deterministic=True)
    shard.write_bytes(b"".join(encode_record(r) for r in records))
    assert f"{shard.name} record 0: one-hot does not encode label" in run(copy, capsys)[1]
    original = list(read_records(io.BytesIO(shard_of(copy, 0).read_bytes())))
    shard_of(copy, 0).write_bytes(b"".join(encode_record(r) for r in original[:-1]))
    output = run(copy, capsys)[1]
    assert (
        f"{shard_of(copy, 0).name}: {len(original) - 1} records, the build's metadata says"
        in output
    )


def test_checks_record_contents(capsys):
    from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
    from beam_pipeline.core.entries import IndexEntry, LabelledEntry
    from beam_pipeline.core.examples import build_example
    from beam_pipeline.core.images import ImagePolicy, normalise_image
    from beam_pipeline.core.labels import Vocabulary

    vocabulary = Vocabulary(("cat",))
    image = normalise_image(jpeg_bytes(40, 20), ImagePolicy())
    entry = IndexEntry("train", "k", "k.JPEG", None, None, 1)
    cat = AnnotatedObject("cat", Box(0, 0, 10, 10), False, False)
    good = build_example(
        LabelledEntry(entry, Annotation(40, 20, (cat,)), 0, (0,), "xml"), image, vocabulary
    )
    assert verify.check_example(good, 1) is None
    assert verify.check_example(good, 2) == "image/class/one_hot has 2 values, expected 3"
    assert verify.check_example(b"\xff\xff", 1).startswith("not a tf.train.Example")
    example = Example.FromString(good)
    del example.features.feature[F.OBJECT_TEXT]
    assert (
        verify.check_example(example.SerializeToString(), 1) == f"missing feature {F.OBJECT_TEXT}"
    )


def test_views_are_checked_as_object_lists_and_not_required_before_schema_2_1():
    from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
    from beam_pipeline.core.entries import IndexEntry, LabelledEntry
    from beam_pipeline.core.examples import build_example
    from beam_pipeline.core.images import ImagePolicy, normalise_image
    from beam_pipeline.core.labels import Vocabulary

    image = normalise_image(jpeg_bytes(40, 20), ImagePolicy())
    entry = IndexEntry("train", "k", "k.JPEG", None, None, 1)
    cat = AnnotatedObject("cat", Box(0, 0, 10, 10), False, False, "Rear")
    unposed = AnnotatedObject("cat", Box(5, 5, 20, 20), False, False)
    annotation = Annotation(40, 20, (cat, unposed))
    good = build_example(
        LabelledEntry(entry, annotation, 0, (0, 0), "xml"), image, Vocabulary(("cat",))
    )
    assert verify.check_example(good, 1) is None
    example = Example.FromString(good)
    assert list(example.features.feature[F.OBJECT_VIEW].bytes_list.value) == [b"Rear", b""]
    example.features.feature[F.OBJECT_VIEW].bytes_list.value.append(b"Left")
    assert verify.check_example(example.SerializeToString(), 1) == (
        "per-object lists have different lengths"
    )
    del example.features.feature[F.OBJECT_VIEW]
    example.features.feature[F.OBJECT_VIEW].int64_list.value.extend([1, 2])
    assert verify.check_example(example.SerializeToString(), 1) == (
        f"{F.OBJECT_VIEW} is int64_list, expected bytes_list"
    )
    del example.features.feature[F.OBJECT_VIEW]
    older = example.SerializeToString()  # as schema 2.0 wrote it
    assert verify.check_example(older, 1) == f"missing feature {F.OBJECT_VIEW}"
    assert verify.check_example(older, 1, schema_version="2.0.0") is None
    # A 2.0 record's other object lists are still checked against each other.
    example.features.feature[F.OBJECT_TEXT].bytes_list.value.append(b"cat")
    assert verify.check_example(example.SerializeToString(), 1, schema_version="2.0.0") == (
        "per-object lists have different lengths"
    )


def test_directory_without_a_build(tmp_path, capsys):
    assert verify.main([str(tmp_path)]) == 2


def test_a_one_shard_build_says_one_shard(tmp_path, capsys):
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=6, num_val=2, seed=3)
    build(tree, out, "--splits", "train", "--num_shards", "1")
    code, output = run(out, capsys)
    assert code == 0 and output.strip() == "OK: 1 shard verified"


def edit_info(out, change):
    """Rewrites `build_info.json` through `change(payload)`, and TFDS's files to agree (as
    `upgrade` would), so only the checks of the metadata itself can notice."""
    path = out / BUILD_INFO_FILE
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))
    assert upgrade.main([str(out)]) == 0


def test_metadata_that_disagrees_with_itself_is_reported(copy, capsys):
    # A shard dropped from the list (the loader read 7 of 8 shards, verify said OK), and a
    # count lowered: the sums and the shard names no longer agree. (Its num_shards follows: a
    # num_shards other than the list's length is damage the reader names before verify's checks.)
    def change(payload):
        train = payload["splits"]["train"]
        train["shards"] = train["shards"][:-1]
        train["num_shards"] = len(train["shards"])
        payload["splits"]["validation"]["num_examples"] -= 1

    edit_info(copy, change)
    capsys.readouterr()
    code, output = run(copy, capsys)
    assert code == 1
    assert (
        "FAIL build_info.json: split 'train': lists 2 shards but not as train-00000-of-00002 to "
        "-00001 (missing ['train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord'], "
        "listed ['train-00000-of-00003.tfrecord', 'train-00001-of-00003.tfrecord']...)"
    ) in output
    assert (
        "FAIL build_info.json: split 'train': its shards hold 16 examples, num_examples" in output
    )
    assert (
        "FAIL build_info.json: split 'validation': its shards hold 8 examples, num_examples says 7"
    ) in output
    assert "FAIL build_info.json: split 'validation': num_discovered 8 != num_examples 7" in output
    # Every reader refuses it, naming the first disagreement (the loader read 7 of 8 shards,
    # stats printed the sums, show and inspect read what was listed: a damaged-output trial).
    damaged = (
        f"{copy}/build_info.json is damaged and the build cannot be read (split 'train': lists "
        "2 shards but not as train-00000-of-00002 to -00001 (missing "
        "['train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord'], listed "
        "['train-00000-of-00003.tfrecord', 'train-00001-of-00003.tfrecord']...) and 4 more: "
        f"python -m beam_pipeline verify {copy} lists them); rebuild it (--overwrite replaces it)"
    )
    assert commands.main(["stats", str(copy)]) == 2
    assert capsys.readouterr().err == f"error: {damaged}\n"
    pytest.importorskip("tensorflow")
    from loaders import load_dataset

    with pytest.raises(DamagedBuildError) as error:
        load_dataset(str(copy), "validation", batch_size=2)
    assert str(error.value) == damaged
    # The shard it no longer lists is still on disk, where a glob reads it.
    assert (
        "FAIL train-00002-of-00003.tfrecord: not a shard of this build (build_info.json does not "
        "list it), but a glob such as train-*.tfrecord reads it: delete it"
    ) in output


def test_counts_that_do_not_count_the_records_are_reported(copy, capsys):
    # Each edit kept every sum, and verify said OK while stats printed the edited figures.
    def change(payload):
        train = payload["splits"]["train"]
        counts = train["class_counts"]
        moved = next(i for i in range(len(counts) - 1) if counts[i])
        counts[moved], counts[moved + 1] = counts[moved] - 1, counts[moved + 1] + 1
        train["objects_per_image"] = {"0": 24}
        train["image_widths"] = {"5000": 24}
        sources = payload["splits"]["validation"]["label_sources"]
        sources["background"] = sources.get("background", 0) + 1
        sources["xml"] -= 1

    edit_info(copy, change)
    capsys.readouterr()
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    lines = [line for line in output.splitlines() if line.startswith("FAIL build_info.json")]
    assert lines[0].startswith(
        "FAIL build_info.json: split 'train': class_counts do not count its records: "
    )
    assert "(records: " in lines[0]
    background = json.loads((copy / BUILD_INFO_FILE).read_text())["splits"]["validation"]
    background = background["label_sources"]["background"]
    assert lines[1:] == [
        "FAIL build_info.json: split 'train': objects_per_image do not count its records",
        "FAIL build_info.json: split 'train': image_widths do not count its records",
        f"FAIL build_info.json: split 'validation': label_sources count {background} "
        f"background, its records hold {background - 1}",
    ]


def test_a_record_stored_twice_in_place_of_another_is_reported(copy, capsys):
    # Record 3 copied over record 4, the shard's size and digest set to agree: "OK".
    shard = shard_of(copy, 0)
    records = list(read_records(io.BytesIO(shard.read_bytes())))
    records[4] = records[3]
    shard.write_bytes(b"".join(encode_record(r) for r in records))

    def change(payload):
        import hashlib

        entry = payload["splits"]["train"]["shards"][0]
        entry["num_bytes"] = shard.stat().st_size
        entry["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()

    edit_info(copy, change)
    capsys.readouterr()
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert (
        "FAIL build_info.json: split 'train': 1 of its records repeat another's image/filename "
        "(a record stored twice: rebuild it)"
    ) in output


def test_class_names_that_disagree_with_the_records_are_reported(copy, capsys):
    def swap(payload):
        payload["classes"][0], payload["classes"][1] = payload["classes"][1], payload["classes"][0]

    edit_info(copy, swap)
    capsys.readouterr()
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert "image/class/text is b'" in output and "in the build's metadata" in output


def test_class_files_that_disagree_with_the_metadata_are_reported(copy, capsys):
    # Two classes swapped in labels.txt, a name edited in the label map: "OK", exit 0.
    labels = (copy / "labels.txt").read_text().splitlines()
    labels[0], labels[1] = labels[1], labels[0]
    (copy / "labels.txt").write_text("".join(f"{name}\n" for name in labels))
    label_map = copy / "label_map.pbtxt"
    text = label_map.read_text()
    assert f'name: "{labels[0]}"' in text
    label_map.write_text(text.replace(f'name: "{labels[0]}"', f'name: "{labels[1]}"', 1))
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    disagrees = "disagrees with the build's metadata on the classes (a reader of it would name "
    assert output.splitlines() == [
        f"FAIL labels.txt: {disagrees}labels wrongly); write it again from the metadata's class "
        "list, one class a line",
        f"FAIL label_map.pbtxt: {disagrees}labels wrongly); delete it and run python -m "
        f"beam_pipeline upgrade {copy}",
        "2 problems in 2 files (4 shards checked)",
    ]
    (copy / "labels.txt").unlink()
    code, output = run(copy, capsys, "--no_decode")
    assert "FAIL labels.txt: missing; write it again" in output
    # A label map deleted (said OK), a directory in a file's place (a traceback): a trial's.
    (copy / "label_map.csv").unlink()
    (copy / "labels.txt").mkdir()
    shard = copy / "train-00000-of-00003.tfrecord"
    shard.unlink()
    shard.mkdir()
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert output.splitlines() == [
        "FAIL train-00000-of-00003.tfrecord: cannot be read: Is a directory",
        "FAIL labels.txt: cannot be read: Is a directory; write it again from the metadata's "
        "class list, one class a line",
        f"FAIL label_map.pbtxt: {disagrees}labels wrongly); delete it and run python -m "
        f"beam_pipeline upgrade {copy}",
        f"FAIL label_map.csv: missing; run python -m beam_pipeline upgrade {copy}",
        "4 problems in 4 files (4 shards checked)",
    ]


def test_a_stray_shard_a_glob_would_read_is_reported(copy, capsys):
    (copy / "train-00003-of-00003.tfrecord").write_bytes(shard_of(copy, 0).read_bytes())
    # Any other record file: a copy a file manager named, a split the metadata lost (a
    # damaged-output trial: verify said OK beside both).
    (copy / "train-00000-of-00003 (copy).tfrecord").write_bytes(b"x")
    (copy / "notes-00000-of-00001.tfrecord").write_bytes(b"not a split of the build")
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert output.splitlines() == [
        "FAIL notes-00000-of-00001.tfrecord: not a shard of this build (build_info.json does not "
        "list it), but a glob such as *.tfrecord reads it: delete it",
        "FAIL train-00000-of-00003 (copy).tfrecord: not a shard of this build (build_info.json "
        "does not list it), but a glob such as train-*.tfrecord reads it: delete it",
        "FAIL train-00003-of-00003.tfrecord: not a shard of this build (build_info.json does not "
        "list it), but a glob such as train-*.tfrecord reads it: delete it",
        "3 problems in 3 files (4 shards checked)",
    ]


def test_the_account_of_rejections_is_checked(copy, capsys):
    rejected = copy / "rejected.jsonl"
    line = {
        "split": "train",
        "path": "x",
        "stage": "image",
        "reason": "truncated_image",
        "detail": "",
        "is_image": True,
    }
    rejected.write_text(rejected.read_text() + json.dumps(line) + "\n")
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert (
        "FAIL rejected.jsonl: names 1 rejected image of split 'train', build_info.json counts 0"
        in output
    )
    assert (
        "FAIL rejected.jsonl: its reasons {'truncated_image': 1} are not build_info.json's "
        "failures {}"
    ) in output
    rejected.write_text(json.dumps(line) + "\n[]\n")  # a line that is not an object
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert (
        "FAIL rejected.jsonl: not the lines a build writes (line 2 is not a build's rejection: "
        "split, reason or is_image is missing)"
    ) in output
    rejected.unlink()
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1
    assert "FAIL rejected.jsonl: missing: the account of rejected files is lost" in output


def test_a_schema_version_older_than_the_records_is_the_metadata_s_fault(copy, capsys):
    # build_info.json edited to say 2.0.0 over 2.1 records: verify blamed each of the 32
    # records ("feature image/object/view is not in schema 2.0.0") and told to rewrite TFDS's
    # files (which say 2.1.0, as the records) with `upgrade`, not the metadata.
    path = copy / BUILD_INFO_FILE
    payload = json.loads(path.read_text())
    path.write_text(json.dumps({**payload, "schema_version": "2.0.0"}))
    assert run(copy, capsys, "--no_decode") == (
        1,
        "FAIL build_info.json: schema_version is 2.0.0, but all 32 records are of schema 2.1.0 "
        "(they carry image/object/view, which schema 2.0.0 has not): the metadata and the "
        'records disagree; set its schema_version back to "2.1.0" (or rebuild)\n'
        "1 problem in 1 file (4 shards checked)\n",
    )
    path.write_text(json.dumps({**payload, "schema_version": "1.1.0"}))
    assert run(copy, capsys, "--no_decode") == (
        1,
        "FAIL build_info.json: schema_version is 1.1.0, but all 32 records are of schema 2.1.0 "
        "(they carry image/key/sha256 and image/object/view, which schema 1.1.0 has not): the "
        'metadata and the records disagree; set its schema_version back to "2.1.0" (or '
        "rebuild)\n1 problem in 1 file (4 shards checked)\n",
    )
    # One shard's records as 2.0 wrote them (no views): records of two schemas.
    shard = shard_of(copy, 0)
    older = [Example.FromString(record) for record in read_records(io.BytesIO(shard.read_bytes()))]
    for example in older:
        del example.features.feature[F.OBJECT_VIEW]
    shard.write_bytes(b"".join(encode_record(e.SerializeToString()) for e in older))
    path.write_text(json.dumps({**payload, "schema_version": "2.0.0"}))
    code, output = run(copy, capsys, "--no_decode")
    assert code == 1 and output.splitlines() == [
        "FAIL build_info.json: schema_version is 2.0.0, but 24 of its 32 records are of schema "
        "2.1.0 (they carry image/object/view, which schema 2.0.0 has not): the metadata and the "
        "records disagree; records of two schemas in one build: rebuild it",
        f"FAIL {shard.name}: {shard.stat().st_size} bytes, expected "
        f"{payload['splits']['train']['shards'][0]['num_bytes']}",
        "2 problems in 2 files (4 shards checked)",
    ]
