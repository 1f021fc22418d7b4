"""A `build_info.json` that is JSON but holds a field of the wrong kind or value (a count as a
string, class counts of the wrong length, a class list that is a string, counts that disagree
with the classes), or that is no file at all, is named damaged, with the field, by the reader
and by every command: a user trial found tracebacks (TypeError, IndexError, IsADirectoryError),
errors that named no file, and `verify` saying OK."""

import json
import pathlib
import shutil
import subprocess
import sys

import pytest
from helpers import build_sample

from beam_pipeline.tools import inspect_record, show, stats, upgrade, verify
from schemas import BUILD_INFO_FILE, DamagedBuildError
from schemas.metadata import read_build_info

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_sample(tmp_path_factory, 6, 3, seed=1, num_shards="train=2,val=1")


def damaged_copy(built, into, edit):
    """A copy of the build with `edit(payload)` applied to its metadata."""
    copy = shutil.copytree(built, into)
    payload = json.loads((copy / BUILD_INFO_FILE).read_text())
    edit(payload)
    (copy / BUILD_INFO_FILE).write_text(json.dumps(payload))
    return copy


def read(out):
    """`schemas.metadata.read_build_info` on local files."""

    def read_text(name):
        path = out / name
        return path.read_text() if path.exists() else None

    return read_build_info(read_text, str(out))


def damaged(out, what):
    return (
        f"{out}/{BUILD_INFO_FILE} is damaged and the build cannot be read ({what}); rebuild it "
        "(--overwrite replaces it)"
    )


def train(key, value):
    return lambda payload: payload["splits"]["train"].__setitem__(key, value)


def top(key, value):
    return lambda payload: payload.__setitem__(key, value)


def option(key, value):
    return lambda payload: payload["options"].__setitem__(key, value)


def asked(split, count):
    return lambda payload: payload["options"]["num_shards"].__setitem__(split, count)


SHARDS = "not a positive count of shards, a count per split, or null"
FRACTION = "not a fraction in [0, 1]"
POLICY = "not one of report, drop_leaks, fail"


def shard(key, value):
    return lambda payload: payload["splits"]["train"]["shards"][0].__setitem__(key, value)


EDITS = {
    # The user trial's edits.
    "count as a string": (
        train("num_examples", "1000"),
        "splits.train.num_examples is the str '1000', not a count",
    ),
    "class counts too short": (
        train("class_counts", [1, 2]),
        "splits.train.class_counts is of length 2, not 5: one count per class, then background",
    ),
    "class counts a string": (
        train("class_counts", "abc"),
        "splits.train.class_counts is the str 'abc', not a list",
    ),
    "histogram count a string": (
        train("objects_per_image", {"0": "x"}),
        "splits.train.objects_per_image.0 is the str 'x', not a count",
    ),
    "no split": (top("splits", {}), "splits names no split"),
    "negative count": (
        train("num_examples", -5),
        "splits.train.num_examples is the int -5, not a count",
    ),
    "classes a string": (top("classes", "circle"), "classes is the str 'circle', not a list"),
    "histogram key no number": (
        train("image_widths", {"abc": 3}),
        "splits.train.image_widths has the key 'abc', not a count",
    ),
    "schema version an int": (
        top("schema_version", 2),
        "schema_version is the int 2, not a version string",
    ),
    "num_classes disagrees": (
        top("num_classes", 7),
        "num_classes is 7, but classes names 4 classes",
    ),
    "background_index disagrees": (
        top("background_index", 2),
        "background_index is 2, but classes puts background at 4",
    ),
    # More.
    "a count that is a bool": (
        train("num_rejected", True),
        "splits.train.num_rejected is the bool True, not a count",
    ),
    "a count that is null": (
        train("folder_disagreements", None),
        "splits.train.folder_disagreements is null, not a count",
    ),
    "a class twice": (
        top("classes", ["circle", "cross", "circle", "triangle"]),
        "classes names 'circle' twice",
    ),
    "a class no string": (
        top("classes", ["circle", 3, "square", "triangle"]),
        "classes[1] is the int 3, not a class name",
    ),
    "display name no string": (
        top("display_names", {"circle": 1}),
        "display_names.circle is the int 1, not a string",
    ),
    "split a list": (
        lambda p: p["splits"].__setitem__("train", []),
        "splits.train is the list [], not a mapping",
    ),
    "split without a count": (
        lambda p: p["splits"]["train"].pop("num_discovered"),
        "splits.train has no num_discovered",
    ),
    "no classes": (lambda p: p.pop("classes"), "it has no classes"),
    "num_shards disagrees": (
        train("num_shards", 3),
        "splits.train.num_shards is 3, but shards lists 2",
    ),
    "labelled disagrees": (
        train("labelled", False),
        "splits.train.labelled is false, but its num_examples and label_sources make it true",
    ),
    "labelled a string": (
        train("labelled", "yes"),
        "splits.train.labelled is the str 'yes', not true or false",
    ),
    "histogram key with a sign": (
        train("image_heights", {"-1": 3}),
        "splits.train.image_heights has the key '-1', not a count",
    ),
    "label source count a float": (
        train("label_sources", {"xml": 6.0}),
        "splits.train.label_sources.xml is the float 6.0, not a count",
    ),
    "shard digest cut": (
        shard("sha256", "ab"),
        "splits.train.shards[0].sha256 is the str 'ab', not 64 lower-case hex digits",
    ),
    "shard digest upper case": (
        shard("sha256", "AB" * 32),
        "splits.train.shards[0].sha256 is the str 'ABABABABABAB...BABABABABABAB', not 64 "
        "lower-case hex digits",
    ),
    "shard field unknown": (shard("crc", 1), "splits.train.shards[0] has the unknown field 'crc'"),
    "shard count past int64": (  # (the loader failed converting it, naming no file)
        shard("num_examples", 2**63),
        "splits.train.shards[0].num_examples is the int 9223372036854775808, not a count",
    ),
    "shard bytes a string": (
        shard("num_bytes", "9"),
        "splits.train.shards[0].num_bytes is the str '9', not a count",
    ),
    "failures count negative": (
        top("failures", {"truncated_image": -1}),
        "failures.truncated_image is the int -1, not a count",
    ),
    "odd images count a string": (
        top("odd_images", {"tiny": "2"}),
        "odd_images.tiny is the str '2', not a count",
    ),
    "options a list": (top("options", []), "options is the list [], not a mapping"),
    "duplicates a list": (top("duplicates", [1]), "duplicates is the list [1], not a mapping"),
    # A review's: verify and stats ended in tracebacks on these.
    "leaked a list": (
        top("duplicates", {"exact_groups": 0, "leaked": ["validation"]}),
        "duplicates.leaked is the list ['validation'], not a mapping",
    ),
    "leaked count a string": (
        top("duplicates", {"exact_groups": 0, "leaked": {"validation": "1"}}),
        "duplicates.leaked.validation is the str '1', not a count",
    ),
    "exact groups a string": (
        top("duplicates", {"exact_groups": "1"}),
        "duplicates.exact_groups is the str '1', not a count",
    ),
    # A metadata fuzzer's (tests/test_fuzz_metadata.py): show ended in a TypeError traceback.
    "tree path a bool": (
        lambda payload: payload["source"].__setitem__("input_dir", True),
        "source.input_dir is the bool True, not a string",
    ),
    # A review's: verify said OK of sizes no build writes (--target_shard_mb in bytes, an int
    # of at least one byte; json writes NaN and Infinity as it reads them).
    "shard size NaN": (
        option("target_shard_bytes", float("nan")),
        "options.target_shard_bytes is the float nan, not a positive count of bytes",
    ),
    "shard size infinite": (
        option("target_shard_bytes", float("inf")),
        "options.target_shard_bytes is the float inf, not a positive count of bytes",
    ),
    "shard size zero": (
        option("target_shard_bytes", 0),
        "options.target_shard_bytes is the int 0, not a positive count of bytes",
    ),
    "shard size negative": (
        option("target_shard_bytes", -134217728),
        "options.target_shard_bytes is the int -134217728, not a positive count of bytes",
    ),
    "shard size a float": (
        option("target_shard_bytes", 134217728.0),
        "options.target_shard_bytes is the float 134217728.0, not a positive count of bytes",
    ),
    # A review's: verify said OK of the other options that mean something to a reader, as no
    # build writes them: the shards asked for (the summary compares them with those made), the
    # error budget, the --duplicates policy (verify's fixes name it).
    "shards asked a string": (
        option("num_shards", "16"),
        f"options.num_shards is the str '16', {SHARDS}",
    ),
    "shards asked zero": (option("num_shards", 0), f"options.num_shards is the int 0, {SHARDS}"),
    "shards asked a float": (
        option("num_shards", 16.0),
        f"options.num_shards is the float 16.0, {SHARDS}",
    ),
    "shards asked a bool": (
        option("num_shards", True),
        f"options.num_shards is the bool True, {SHARDS}",
    ),
    "shards asked a list": (
        option("num_shards", [2, 1]),
        f"options.num_shards is the list [2, 1], {SHARDS}",
    ),
    "a split's shards asked zero": (
        asked("train", 0),
        "options.num_shards.train is the int 0, not a positive count of shards",
    ),
    "a split's shards asked a string": (
        asked("validation", "1"),
        "options.num_shards.validation is the str '1', not a positive count of shards",
    ),
    "budget NaN": (
        option("max_bad_fraction", float("nan")),
        f"options.max_bad_fraction is the float nan, {FRACTION}",
    ),
    "budget infinite": (
        option("max_bad_fraction", float("inf")),
        f"options.max_bad_fraction is the float inf, {FRACTION}",
    ),
    "budget over 1": (
        option("max_bad_fraction", 1.5),
        f"options.max_bad_fraction is the float 1.5, {FRACTION}",
    ),
    "budget negative": (
        option("max_bad_fraction", -0.01),
        f"options.max_bad_fraction is the float -0.01, {FRACTION}",
    ),
    "budget a string": (
        option("max_bad_fraction", "0.01"),
        f"options.max_bad_fraction is the str '0.01', {FRACTION}",
    ),
    "budget a bool": (
        option("max_bad_fraction", False),
        f"options.max_bad_fraction is the bool False, {FRACTION}",
    ),
    "budget null": (
        option("max_bad_fraction", None),
        f"options.max_bad_fraction is null, {FRACTION}",
    ),
    "copies policy off": (
        option("duplicates", "off"),
        f"options.duplicates is the str 'off', {POLICY}",
    ),
    "copies policy misspelt": (
        option("duplicates", "Report"),
        f"options.duplicates is the str 'Report', {POLICY}",
    ),
    "copies policy a bool": (
        option("duplicates", True),
        f"options.duplicates is the bool True, {POLICY}",
    ),
}


@pytest.mark.parametrize("name", EDITS)
def test_a_field_of_the_wrong_kind_is_named_by_the_reader_and_every_command(
    built, tmp_path, capsys, name
):
    edit, what = EDITS[name]
    out = damaged_copy(built, tmp_path / "out", edit)
    said = damaged(out, what)
    with pytest.raises(DamagedBuildError) as raised:
        read(out)
    assert str(raised.value) == said
    capsys.readouterr()
    assert verify.main([str(out), "--workers", "1"]) == 1
    assert capsys.readouterr() == (f"FAIL {said}\n", "")
    for command, code in (
        (stats.main, 2),
        (upgrade.main, 2),
        (lambda argv: show.main([*argv, "-o", str(tmp_path / "x.png")]), 1),
        (lambda argv: show.main([*argv, "--histogram", "-o", str(tmp_path / "h.png")]), 1),
        (lambda argv: inspect_record.main([*argv, "--split", "train", "--index", "0"]), 1),
    ):
        assert command([str(out)]) == code
        assert capsys.readouterr() == ("", f"error: {said}\n")
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "h.png").exists()


@pytest.mark.parametrize(
    "flags, changed",
    [
        ((), {}),
        (("--num_shards", "1", "--max_bad_fraction", "0"), {}),
        (("--num_shards", "train=3,val=1", "--max_bad_fraction", "1"), {}),
        (("--duplicates", "report", "--target_shard_mb", "0.000001"), {}),
        (("--duplicates", "drop_leaks", "--max_bad_fraction", "0.5"), {}),
        (("--duplicates", "fail",), {"max_bad_fraction": 0}),  # (a BuildConfig made in Python)
        ((), {"max_bad_fraction": 1}),
    ],
    ids=["defaults", "one shard", "per split", "report", "drop_leaks", "fail", "budget int 1"],
)  # fmt: skip
def test_the_options_every_build_writes_are_read(built, tmp_path, flags, changed):
    # The checks of the options refuse no value a build writes: null, a count and a count per
    # split of shards; a budget of 0, 1 (an int where a BuildConfig was made with one) or
    # between; each --duplicates policy recorded.
    import dataclasses

    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.options import BuildConfig

    argv = ["--input_dir", "in", "--output_dir", "out", *flags]
    config = dataclasses.replace(BuildConfig.from_options(PipelineOptions(argv)), **changed)
    out = damaged_copy(built, tmp_path / "out", top("options", config.to_metadata()))
    assert read(out).options == config.to_metadata()


def run(*argv):
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_the_commands_say_it_in_a_line_not_a_traceback(built, tmp_path):
    out = damaged_copy(built, tmp_path / "out", train("num_examples", "1000"))
    said = damaged(out, "splits.train.num_examples is the str '1000', not a count")
    verified = run("verify", out, "--workers", 1)
    assert (verified.returncode, verified.stdout, verified.stderr) == (1, f"FAIL {said}\n", "")
    shown = run("show", out, "-o", tmp_path / "x.png")
    assert (shown.returncode, shown.stdout, shown.stderr) == (1, "", f"error: {said}\n")


@pytest.mark.parametrize(
    "text, what",
    [
        ("[" * 100_000 + "]" * 100_000, "not a build's JSON: nested too deep"),
        ('{"schema_version": "2.1.0", "classes": ["circ\\ud800le"]}', "a string holds a lone "
         "surrogate, not text"),
        # A reader-and-tools trial: verify and upgrade said "invalid literal for int()", the
        # loader "update imagenet-tfrecords", verify of "2.1" that 2.1.0's key was not 2.1's.
        ('{"schema_version": "2.x"}', "schema_version is '2.x', not a version such as '2.1.0'"),
        ('{"schema_version": "2.1"}', "schema_version is '2.1', not a version such as '2.1.0'"),
        ('{"schema_version": " abc"}', "schema_version is ' abc', not a version such as "
         "'2.1.0'"),
    ],
    ids=["nested", "surrogate", "2.x", "2.1", "abc"],
)  # fmt: skip
def test_json_no_reader_can_take_is_named_damaged(built, tmp_path, capsys, text, what):
    # A damaged-output trial's: a RecursionError traceback in every tool; a class name no
    # UTF-8 file can hold made stats end in a UnicodeEncodeError traceback.
    out = shutil.copytree(built, tmp_path / "out")
    (out / BUILD_INFO_FILE).write_text(text)
    said = damaged(out, what)
    with pytest.raises(DamagedBuildError) as raised:
        read(out)
    assert str(raised.value) == said
    assert stats.main([str(out)]) == 2
    assert capsys.readouterr() == ("", f"error: {said}\n")


def test_a_directory_in_its_place_is_named_damaged(built, tmp_path, capsys):
    out = shutil.copytree(built, tmp_path / "out")
    (out / BUILD_INFO_FILE).unlink()
    (out / BUILD_INFO_FILE).mkdir()
    said = damaged(out, "reading it fails: Is a directory")
    stated = run("stats", out)
    assert (stated.returncode, stated.stdout, stated.stderr) == (2, "", f"error: {said}\n")
    assert verify.main([str(out), "--workers", "1"]) == 1
    assert capsys.readouterr() == (f"FAIL {said}\n", "")
    assert inspect_record.main([str(out), "--split", "train", "--index", "0"]) == 1
    assert capsys.readouterr() == ("", f"error: {said}\n")
    from loaders.info import dataset_info

    with pytest.raises(DamagedBuildError) as raised:
        dataset_info(str(out))
    assert str(raised.value) == said


def test_the_loader_names_the_field(built, tmp_path):
    from loaders.info import dataset_info

    out = damaged_copy(built, tmp_path / "out", train("class_counts", [1, 2]))
    with pytest.raises(DamagedBuildError) as raised:
        dataset_info(str(out))
    assert str(raised.value) == damaged(
        out, "splits.train.class_counts is of length 2, not 5: one count per class, then background"
    )


def empty_train(payload, num_shards):
    split = payload["splits"]["train"]
    split.update(num_examples=0, num_rejected=split["num_discovered"], shards=[])
    split.update(num_shards=num_shards, class_counts=[0] * 5, label_sources={})
    for key in ("objects_per_image", "image_widths", "image_heights"):
        split[key] = {}


def test_a_split_without_shards_reads_when_its_counts_say_so(built, tmp_path):
    out = damaged_copy(built, tmp_path / "empty", lambda p: empty_train(p, 0))
    assert read(out).splits["train"].shards == ()
    out = damaged_copy(built, tmp_path / "lying", lambda p: empty_train(p, 1))
    with pytest.raises(DamagedBuildError) as raised:
        read(out)
    assert str(raised.value) == damaged(out, "splits.train.num_shards is 1, but shards lists 0")


def as_schema_1_0(payload):
    """The fields a 1.0 build wrote: no label fields, histograms or display names."""
    payload["schema_version"] = "1.0.0"
    for key in ("display_names", "num_classes", "background_index"):
        del payload[key]
    for split in payload["splits"].values():
        for key in ("labelled", "label_sources", "folder_disagreements", "num_shards"):
            del split[key]
        for key in ("objects_per_image", "image_widths", "image_heights"):
            del split[key]


def test_older_schemas_read_and_are_checked_alike(built, tmp_path):
    out = damaged_copy(built, tmp_path / "old", as_schema_1_0)
    info = read(out)
    assert info.schema_version == "1.0.0" and info.splits["train"].labelled
    out = damaged_copy(
        built, tmp_path / "short", lambda p: (as_schema_1_0(p), train("class_counts", [6])(p))
    )
    with pytest.raises(DamagedBuildError) as raised:
        read(out)
    assert str(raised.value) == damaged(
        out, "splits.train.class_counts is of length 1, not 5: one count per class, then background"
    )


def test_a_newer_schema_is_no_damage_whatever_its_fields(built, tmp_path):
    def newer(payload):
        payload["schema_version"] = "3.0.0"
        train("num_examples", "1000")(payload)

    out = damaged_copy(built, tmp_path / "newer", newer)
    with pytest.raises(ValueError, match="update imagenet-tfrecords to read it") as raised:
        read(out)
    assert not isinstance(raised.value, DamagedBuildError)
    out = damaged_copy(built, tmp_path / "int", top("schema_version", 2))
    with pytest.raises(DamagedBuildError, match="schema_version is the int 2"):
        read(out)
