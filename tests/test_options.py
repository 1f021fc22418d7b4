import argparse
import os
import pathlib
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
)

from beam_pipeline import failures, pipeline
from beam_pipeline.options import BuildConfig, BuildOptions, parse_image_size, parse_num_shards
from beam_pipeline.runners import beam_flags, dataflow, local, machine
from beam_pipeline.runners.beam_flags import DASK_RUNNER, beam_argv
from beam_pipeline.runners.local import pipeline_options
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import sample_tree
from beam_pipeline.tools.build import tune_malloc


def config(*args):
    return BuildConfig.from_options(
        PipelineOptions(["--input_dir", "in", "--output_dir", "out", *args])
    )


def test_defaults():
    c = config()
    assert c.splits == ()  # the layout's default, chosen once the tree is found
    assert c.num_shards is None and c.seed == 0 and c.image_policy.mode == "original"
    assert c.max_bad_fraction == 0.01 and c.overwrite is False


@pytest.mark.parametrize("split", ["all", "ALL", "train.small", "my split"])
def test_a_split_tfds_cannot_load_by_name_is_refused(split):
    # A VOC list all.txt was built (--splits train,all): TFDS's metadata named a split that
    # tfds.load(split="all") takes for every split (it recursed), a TFDS trial found.
    with pytest.raises(ValueError) as refused:
        config("--splits", f"train,{split}")
    assert str(refused.value) == (
        f"--splits {split}: the build would write a split named {split!r}, which TFDS cannot "
        "load (to it 'all' is every split together, and a split's name is letters, digits, "
        "'_' and '-', as in 'train[:10%]+test'); rename its list or folder in the tree"
    )
    assert config("--splits", "train,val,mini-train,Test_2").splits == (
        "train",
        "val",
        "mini-train",
        "Test_2",
    )


@pytest.mark.parametrize("flag", ["--input_dir", "--output_dir"])
def test_a_blank_folder_is_refused(flag):
    # --output_dir ' ' built into a folder named ' ', exit 0 (a CLI fuzz trial).
    argv = {"--input_dir": "in", "--output_dir": "out", flag: " "}
    with pytest.raises(ValueError, match=rf"^{flag} ' ' is blank: name a folder$"):
        BuildConfig.from_options(PipelineOptions([x for kv in argv.items() for x in kv]))


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--input_dir", "in", "--rejections", "1", "--rejections", "2"],
        ["show", "out", "-o", "a.png", "-o", "b.png"],
        ["sample", "new", "--train", "1", "--train", "2"],
        ["inspect", "out", "--index", "1", "--index", "2"],
        ["verify", "out", "--workers", "1", "--workers=2"],
    ],
)
def test_a_commands_flag_given_twice_with_two_values_is_refused(
    argv, tmp_path, capsys, monkeypatch
):
    # The last one won unseen (show -o a.png -o b.png wrote b.png alone), as build refuses.
    from beam_pipeline.tools import commands

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        commands.main(argv)
    assert exited.value.code == 2
    flag = argv[-2].split("=")[0] if "=" not in argv[-1] else argv[-1].split("=")[0]
    assert f"error: {flag} given twice with different values" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_console_flag_without_its_value_is_refused_as_the_builds(capsys):
    # The console's own parser said `usage: __main__.py [--verbose] [--quiet] [--log_file ...]`.
    with pytest.raises(SystemExit) as exited:
        build_tool.main(["--input_dir", "in", "--output_dir", "out", "--log_file", "--quiet"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "usage: python -m beam_pipeline build --input_dir TREE --output_dir OUT [FLAGS] "
        "(--help lists them)\npython -m beam_pipeline build: error: argument --log_file: "
        "expected one argument\n"
    )


def test_dataflow_flags_pass_through_next_to_ours():
    argv = [
        "--input_dir",
        "gs://b/ILSVRC",
        "--output_dir",
        "gs://b/out",
        "--runner",
        "DataflowRunner",
        "--project",
        "P",
        "--region",
        "R",
        "--temp_location",
        "gs://b/tmp",
        "--setup_file",
        "./setup.py",
        "--num_shards",
        "train=1024,val=128",
        "--seed",
        "42",
    ]
    options = PipelineOptions(argv)
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("P", "R", "gs://b/tmp")
    assert options.view_as(SetupOptions).setup_file == "./setup.py"
    c = BuildConfig.from_options(options)
    assert c.input_dir == "gs://b/ILSVRC" and c.seed == 42
    assert c.num_shards_for("train") == 1024 and c.num_shards_for("validation") == 128


@pytest.mark.parametrize(
    "args, runner",
    [([], "FnApiRunner"), (["--runner", "DataflowRunner"], "DataflowRunner")],
    ids=["default", "chosen"],
)
def test_local_builds_pin_fnapi_runner_unless_a_runner_is_chosen(args, runner):
    """DirectRunner would try Prism first: a binary downloaded at run time."""
    options = pipeline_options(["--input_dir", "in", "--output_dir", "out", *args])
    assert options.view_as(StandardOptions).runner == runner
    assert options.get_all_options()["runner"] == runner


def test_direct_runner_modes_pass_through():
    options = PipelineOptions(
        ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    )
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    assert options.view_as(DirectOptions).direct_num_workers == 2


@pytest.mark.parametrize(
    "args, mode, workers, described",
    [
        ([], "multi_processing", 6, "on 6 worker processes"),
        (["--direct_num_workers", "3"], "multi_processing", 3, "on 3 worker processes"),
        (["--direct_running_mode", "in_memory"], "in_memory", 1, "in this process (in_memory)"),
        (
            ["--direct_running_mode=multi_threading", "--direct_num_workers", "4"],
            "multi_threading",
            4,
            "on 4 worker threads",
        ),
    ],
    ids=["default", "workers named", "mode named", "both named"],
)
def test_the_command_line_uses_every_core_unless_told_otherwise(
    monkeypatch, args, mode, workers, described
):
    monkeypatch.setattr(machine, "available_cores", lambda: 6)
    options = pipeline_options(["--input_dir", "in", *args], every_core=True)
    direct = options.view_as(DirectOptions)
    assert (direct.direct_running_mode, direct.direct_num_workers) == (mode, workers)
    assert local.describe_workers(options) == described
    # The library call keeps Beam's defaults; a named runner is left alone.
    library = pipeline_options(["--input_dir", "in"]).view_as(DirectOptions)
    assert (library.direct_running_mode, library.direct_num_workers) == ("in_memory", 1)
    dataflow = pipeline_options(["--runner", "DataflowRunner"], every_core=True)
    assert dataflow.view_as(DirectOptions).direct_running_mode == "in_memory"
    assert local.describe_workers(dataflow) == "on DataflowRunner"


@pytest.mark.parametrize(
    "images, one_shard, args, workers",
    [
        (999, False, [], 1),
        (1000, False, [], 6),
        (1200, True, [], 1),  # each split one shard: one worker would write it
        (None, False, [], 6),  # not counted: a library call names no tree
        (20, False, ["--direct_num_workers", "3"], 3),
        (1200, True, ["--direct_num_workers", "3"], 3),
        (20, False, ["--direct_running_mode", "multi_processing"], 1),
    ],
)
def test_a_small_build_stays_in_this_process_unless_workers_are_asked_for(
    monkeypatch, images, one_shard, args, workers
):
    monkeypatch.setattr(machine, "available_cores", lambda: 6)
    options = pipeline_options(args, every_core=True, images=images, one_shard=one_shard)
    assert options.view_as(DirectOptions).direct_num_workers == workers


def test_images_and_their_bytes_are_counted_only_up_to_the_limits(tmp_path):
    from beam_pipeline.tree import layouts

    for split, number in (("train", 7), ("val", 5)):
        for index in range(number):
            path = tmp_path / "Data" / "DET" / split / f"s{index % 2}" / f"{index}.JPEG"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x" * 10)
    for index in range(50):
        xml = tmp_path / "Annotations" / "DET" / "train" / f"s{index % 2}" / f"{index}.xml"
        xml.parent.mkdir(parents=True, exist_ok=True)
        xml.write_text("<a/>")
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    plan = pipeline.prepare(BuildConfig.from_options(PipelineOptions(argv))).plan
    assert plan.root == str(tmp_path)
    assert {t.kind for t in plan.tasks} == {layouts.IMAGES, layouts.ANNOTATIONS}
    assert local.tree_size_up_to(plan, 1000, 0) == (12, 120)  # images only, every split
    assert local.tree_size_up_to(plan, 10, 0) == (10, 100)
    assert local.tree_size_up_to(plan, 3, 55) == (6, 60)  # past both: 3 files, 55 bytes


def test_a_build_of_one_shard_s_worth_stays_in_this_process(monkeypatch, tmp_path):
    # 40 images of a few KB, counted as if past SMALL_BUILD_IMAGES: one shard a split unless
    # --num_shards or --target_shard_mb asks for more.
    tree = tmp_path / "tree"
    sample_tree.write_tree(str(tree), num_train=30, num_val=10, seed=0)
    monkeypatch.setattr(pipeline, "SMALL_BUILD_IMAGES", 20)
    monkeypatch.setattr(local, "SMALL_BUILD_IMAGES", 20)
    monkeypatch.setattr(machine, "available_cores", lambda: 6)
    for extra, workers in (([], 1), (["--num_shards", "2"], 6), (["--target_shard_mb", "0.01"], 6)):
        argv = ["--input_dir", str(tree), "--output_dir", str(tmp_path / "out"), *extra]
        options, _ = pipeline.prepare_build(argv, every_core=True)
        assert options.view_as(DirectOptions).direct_num_workers == workers, extra


@pytest.mark.parametrize("flag", ["--num_workers", "--max_num_workers"])
def test_a_cloud_worker_count_is_refused_in_a_local_build(flag):
    with pytest.raises(ValueError) as error:
        pipeline_options([flag, "4"], every_core=True)
    assert str(error.value) == (
        f"{flag} sizes a cloud runner's workers and does nothing in a local build: pass "
        "--direct_num_workers N for N local worker processes, or --runner DataflowRunner"
    )
    dataflow = pipeline_options(["--runner", "DataflowRunner", flag, "4"])
    assert dataflow.get_all_options()[flag[2:]] == 4


def test_one_core_stays_in_memory(monkeypatch):
    monkeypatch.setattr(machine, "available_cores", lambda: 1)
    options = pipeline_options([], every_core=True).view_as(DirectOptions)
    assert (options.direct_running_mode, options.direct_num_workers) == ("in_memory", 1)


@pytest.mark.parametrize("quota, cap", [("max 100000", None), ("150000 100000", 2)])
def test_available_cores_is_what_this_process_may_use(tmp_path, monkeypatch, quota, cap):
    (tmp_path / "cpu.max").write_text(quota + "\n")
    monkeypatch.setattr(machine, "CGROUP_CPU_MAX", str(tmp_path / "cpu.max"))
    affinity = len(os.sched_getaffinity(0))
    assert machine.available_cores() == (affinity if cap is None else min(affinity, cap))


def test_image_policy_flags():
    c = config("--image_policy", "exact", "--image_size", "224x192", "--jpeg_quality", "90")
    assert c.image_policy.size == (224, 192) and c.image_policy.jpeg_quality == 90
    assert config("--image_policy", "shorter_side", "--image_size", "256").image_policy.size == (
        256,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--image_policy", "exact"], "needs --image_size"),
        (["--image_policy", "exact", "--image_size", "224"], "HxW"),
        (["--image_size", "224"], "needs --image_policy"),
        (["--num_shards", "0"], "at least 1"),
        (["--num_shards", "train=x"], "--num_shards"),
        (["--max_bad_fraction", "2"], "max_bad_fraction"),
        (["--splits", "train,train"], "distinct"),
    ],
)
def test_bad_flags_are_refused_with_the_flag_named(args, message):
    with pytest.raises(ValueError, match=message):
        config(*args)


def test_missing_directories_are_refused():
    with pytest.raises(ValueError, match="--input_dir"):
        BuildConfig.from_options(PipelineOptions(["--output_dir", "x"]))


def test_parsers():
    assert parse_num_shards("16") == 16
    assert parse_num_shards("train=4, val=2") == {"train": 4, "validation": 2}
    assert parse_num_shards(None) is None
    with pytest.raises(ValueError, match=r"^--num_shards is empty: give N or split=N"):
        parse_num_shards(" ")  # (taken as not given: the size-based default, silently)
    with pytest.raises(ValueError, match=r"^--labels_file is empty: name the file"):
        config("--labels_file", "")
    for twice in ("train=2,train=3", "val=2,validation=3"):  # not the last one silently
        with pytest.raises(ValueError, match=r"^--num_shards names '(train|validation)' twice: "):
            parse_num_shards(twice)
    for malformed in ("x", "train=a", "train", "=3", "train=4,", "4,2"):
        with pytest.raises(ValueError) as error:
            parse_num_shards(malformed)
        assert str(error.value) == f"--num_shards must be N or split=N,...; got {malformed!r}"
    assert parse_image_size("original", None) == ()


def test_malloc_tuning_reaches_worker_processes_and_yields_to_the_environment(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4096")
    tune_malloc()
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['MALLOC_ARENA_MAX'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "2"  # DirectRunner's worker processes inherit it
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(1 << 20)
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == "4096"


DATAFLOW_AND_DIRECT = [
    "--runner",
    "DataflowRunner",
    "--project",
    "P",
    "--region",
    "europe-west1",
    "--temp_location",
    "gs://b/tmp",
    "--setup_file",
    "./setup.py",
    "--direct_num_workers",
    "2",
    "--direct_running_mode",
    "multi_processing",
    "--experiments=use_runner_v2",
]


def test_beam_options_pass_through_and_the_project_flags_stay_out_of_beam():
    ours = ["--input_dir", "gs://b/in", "--output_dir", "gs://b/out", "--seed", "3", "--overwrite"]
    assert beam_argv([*ours[:4], *DATAFLOW_AND_DIRECT, *ours[4:]]) == DATAFLOW_AND_DIRECT
    assert beam_argv(ours) == []


@pytest.mark.parametrize(
    "typo, message",
    [
        (["--seeed", "5"], "unknown flag --seeed (did you mean --seed?)"),
        (["--num_shardz", "4"], "unknown flag --num_shardz (did you mean --num_shards?)"),
        (["--temp_locaton=gs://x"], "unknown flag --temp_locaton (did you mean --temp_location?)"),
        (["--runer", "DataflowRunner"], "unknown flag --runer (did you mean --runner?)"),
        # A flag cut short: the project's it starts (--out was taken for --layout).
        (["--out", "X"], "unknown flag --out (did you mean --output_dir?)"),
        (["--dupl", "report"], "unknown flag --dupl (did you mean --duplicates?)"),
        (
            ["--frobnicate"],
            "unknown flag --frobnicate; `python -m beam_pipeline build --help` lists",
        ),
        (["stray"], "unexpected argument 'stray': every value follows its flag"),
        # Keras's and TFDS's words (a user trial's): what does their work here.
        (
            ["--subset", "training"],
            "unknown flag --subset (Keras's or TFDS's: a build writes every split: hold one "
            'out with --validation_split 0.2, then load split="validation")',
        ),
        (
            ["--class_names=a,b"],
            "unknown flag --class_names (Keras's or TFDS's: --labels_file FILE (one class a "
            "line) chooses the classes and their order)",
        ),
        (["--batch_size", "8"], "unknown flag --batch_size (Keras's or TFDS's: batches are"),
    ],
)
def test_an_unknown_flag_is_refused_with_the_closest_known_one(typo, message):
    with pytest.raises(ValueError) as error:
        beam_argv(["--input_dir", "in", "--output_dir", "out", *typo])
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    "runner",
    ["DaskRunner", "daskrunner", "dask", "apache_beam.runners.dask.dask_runner.DaskRunner"],
)
def test_dask_runner_names_mean_the_projects_dask_runner(runner):
    argv = ["--runner", runner, "--dask_client_address", "tcp://127.0.0.1:8786"]
    assert beam_argv(argv) == ["--runner", DASK_RUNNER, *argv[2:]]
    assert beam_argv([f"--runner={runner}"]) == [f"--runner={DASK_RUNNER}"]
    options = pipeline_options(beam_argv(argv), every_core=True)
    assert options.view_as(StandardOptions).runner == DASK_RUNNER
    assert local.describe_workers(options) == "on the Dask cluster at tcp://127.0.0.1:8786"


def test_dask_options_without_the_dask_runner_are_refused():
    with pytest.raises(ValueError, match=r"^--dask_client_address is an option of the Dask runner"):
        beam_argv(["--dask_client_address", "tcp://127.0.0.1:8786"])
    with pytest.raises(ValueError, match=r"^--dask_npartitions is an option of the Dask runner"):
        beam_argv(["--runner", "FnApiRunner", "--dask_npartitions=4"])


def test_the_dask_runner_without_dask_installed_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "distributed" else real(name)
    )
    with pytest.raises(ValueError) as error:
        beam_argv(["--runner", "DaskRunner"])
    assert str(error.value) == (
        "--runner DaskRunner needs Dask's distributed scheduler, which is not installed: "
        "pip install 'imagenet-tfrecords[dask]'"
    )


def test_a_typo_never_runs_a_build(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(out), "--seeed", "5"]
    assert build_tool.main(argv) == 2
    assert capsys.readouterr().err == (
        "error: unknown flag --seeed (did you mean --seed?); `python -m beam_pipeline build "
        "--help` lists the project's flags, and every Apache Beam pipeline option is accepted\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        # A value of the wrong type, or none: argparse's exit said it only in the log.
        (["--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
        (["--overwrite=no"], "argument --overwrite: ignored explicit argument 'no'"),
        (
            ["--direct_num_workers", "two"],
            "argument --direct_num_workers: invalid int value: 'two'",
        ),
        (["--runner"], "argument --runner: expected one argument"),
        (["--labels_file"], "argument --labels_file: expected one argument"),
        (["--seed", "--seed"], "argument --seed: expected one argument"),  # ("given twice")
        # A flag given twice: the last one won, unseen (a wrapper script appending flags).
        (
            ["--num_shards", "2", "--seed", "1", "--num_shards=5", "--seed", "2", "--seed", "1"],
            "--num_shards, --seed given twice with different values (--num_shards 2 and 5; "
            "--seed 1 and 2): give each once (the last one would win unseen)",
        ),
        # Beam's own flags too: --runner DirectRunner --runner DaskRunner ran on Dask.
        (
            ["--direct_num_workers", "2", "--direct_num_workers", "3"],
            "--direct_num_workers given twice with different values (--direct_num_workers 2 "
            "and 3): give each once (the last one would win unseen)",
        ),
        # Values that ran a build to no end: every image a decompression bomb, a traceback.
        (["--max_pixels", "0"], "--max_pixels must be at least 1, not 0"),
        (["--target_shard_mb", "inf"], "--target_shard_mb must be a positive number, not inf"),
        (["--target_shard_mb", "nan"], "--target_shard_mb must be a positive number, not nan"),
        # Refusals that did not name the flag, the split or the value (a new-user trial).
        (
            ["--target_shard_mb", "1e-7"],
            "--target_shard_mb 1e-07 is less than one byte: it is in MiB (default 128)",
        ),
        (
            ["--image_policy", "shorter_side", "--image_size", "0"],
            "--image_size 0: sizes are pixels, at least 1",
        ),
        (
            ["--image_policy", "exact", "--image_size", "224x0"],
            "--image_size 224x0: sizes are pixels, at least 1",
        ),
        (["--image_size", ""], "--image_size is empty: give N or HxW, or leave the flag out"),
        (["--jpeg_quality", "0"], "--jpeg_quality must be in [1, 100], not 0"),
        (["--num_shards", "0"], "--num_shards must be at least 1, not 0"),
        (
            ["--num_shards", "train=2,val=0"],
            "--num_shards validation=0: each split needs at least 1 shard (leave a split out "
            "of --splits to skip it)",
        ),
        (
            ["--image_policy", "exact", "--image_size", "70000x70000"],
            "--image_size 70000x70000: a JPEG side holds at most 65500 pixels",
        ),
    ],
)
def test_a_bad_value_or_a_repeated_flag_is_one_error_line(tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    assert build_tool.main(["--input_dir", str(tmp_path), "--output_dir", str(out), *flags]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not out.exists()


def test_the_same_flag_and_value_twice_is_harmless():
    argv = ["--input_dir", "in", "--output_dir", "out", "--seed", "3", "--seed=3"]
    assert beam_flags.beam_argv([*argv, "--overwrite", "--overwrite", "--input_dir", "in"]) == []
    # Flags given once per value, as Beam means them, repeat.
    repeated = [
        "--experiments",
        "a",
        "--experiments=b",
        "--extra_package",
        "x",
        "--extra_package=y",
    ]
    assert beam_flags.beam_argv([*argv, *repeated]) == repeated


@pytest.mark.parametrize(
    "value, unknown",
    [("trian=2", "['trian']"), ("train=2,test=1", "['test']")],
)
def test_split_keyed_values_name_only_splits_being_built(value, unknown):
    with pytest.raises(ValueError) as error:
        config("--splits", "train,val", "--num_shards", value)
    assert str(error.value) == (
        f"--num_shards names {unknown}, which this build does not write; its splits are "
        "['train', 'validation'] (--splits train,val; val is written as validation)"
    )
    assert config("--splits", "train,test", "--num_shards", "train=2,test=1").num_shards == {
        "train": 2,
        "test": 1,
    }


def test_split_keyed_shard_counts_name_the_held_out_splits_too():
    held_out = ("--splits", "train", "--validation_split", "0.2", "--test_split", "0.1")
    counts = "train=2,validation=3,test=1"
    assert config(*held_out, "--num_shards", counts).num_shards == {
        "train": 2,
        "validation": 3,
        "test": 1,
    }
    with pytest.raises(ValueError) as error:
        config(*held_out[:4], "--num_shards", counts)
    assert str(error.value) == (
        "--num_shards names ['test'], which this build does not write; its splits are "
        "['train', 'validation'] (--splits train; val is written as validation)"
    )


@pytest.mark.parametrize("where", ["alone", "after Beam flags"])
def test_help_lists_every_project_flag_wherever_it_is_asked(where, capsys):
    argv = ["--help"] if where == "alone" else ["--direct_num_workers", "2", "--help"]
    assert build_tool.main(argv) == 0
    printed = capsys.readouterr().out
    parser = argparse.ArgumentParser()
    BuildOptions._add_argparse_args(parser)
    flags = [f for action in parser._actions for f in action.option_strings if f.startswith("--")]
    assert len(flags) > 10
    for flag in flags:
        assert flag in printed
    assert "Every Apache Beam pipeline option is accepted" in " ".join(printed.split())


CLOUD = ["--runner", "DataflowRunner", "--input_dir", "gs://b/tree", "--output_dir", "gs://b/o"]
SETUP = str(pathlib.Path(__file__).resolve().parents[1] / "setup.py")
PACKAGE = str(pathlib.Path(__file__).resolve().parents[1] / "beam_pipeline")
README = str(pathlib.Path(__file__).resolve().parents[1] / "README.md")


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--runner", "DaskRuner"],
            "unknown --runner DaskRuner (did you mean DaskRunner?): DaskRunner, DataflowRunner, ",
        ),
        (["--runner", "Foo"], "unknown --runner Foo: DaskRunner, DataflowRunner, DirectRunner"),
        (["--streaming"], "--streaming: a build is a batch pipeline over a finite tree; drop it"),
        # Beam said so once the build had begun (exit 1, the output made; a CLI fuzz trial).
        (
            ["--runner", "PortableRunner"],
            "--runner PortableRunner needs --job_endpoint HOST:PORT, the address of a running "
            "Beam job service",
        ),
        (
            ["--runner", "DaskRunner", "--direct_num_workers", "4", "--num_workers", "2"],
            "--direct_num_workers, --num_workers does nothing on Dask, whose cluster runs the "
            "build",
        ),
        (
            ["--runner", "DataflowRunner", "--project", "p", "--region", "r"],
            "--runner DataflowRunner: --input_dir TREE, --output_dir OUT are on this machine, "
            "which Dataflow's workers cannot reach",
        ),
        # Found before the tree is read, which on an unreachable Cloud Storage retried for
        # minutes before Beam's own validation ran.
        (
            [*CLOUD, "--setup_file", "./no-such-setup.py"],
            "--runner DataflowRunner: --setup_file ./no-such-setup.py does not exist",
        ),
        # A directory was said not to exist; a README passed and failed at submission.
        (
            [*CLOUD, "--setup_file", PACKAGE],
            f"--runner DataflowRunner: --setup_file {PACKAGE} is a directory, not a file",
        ),
        (
            [*CLOUD, "--setup_file", README],
            f"--runner DataflowRunner: --setup_file {README} is not a setup.py (Beam runs it "
            "to package this project for the workers): pass --setup_file ./setup.py",
        ),
        (
            [*CLOUD, "--setup_file", SETUP, "--region", "us-central1"],
            "--runner DataflowRunner: Missing GCS path option: temp_location. Missing GCS path "
            "option: staging_location. Missing required option: project.",
        ),
        (
            [
                "--runner",
                "DataflowRunner",
                "--input_dir",
                "gs://b/tree",
                "--output_dir",
                "gs://b/o",
            ],
            "--runner DataflowRunner: the workers need this package: pass --setup_file ./setup.py",
        ),
        (
            ["--output_dir", "gs://b/out"],
            "--output_dir gs://b/out: no Apache Beam file system for gs:// is installed: "
            "pip install 'imagenet-tfrecords[dataflow]' (Beam's gcp extra)",
        ),
        # A Dataflow job's flags without its runner: a local build of the whole tree began.
        (
            ["--project", "p", "--region", "us-central1"],
            "--project, --region name a Dataflow job, and this command line names no runner: "
            "add --runner DataflowRunner to build on Dataflow, or leave them out",
        ),
        # Beam only logs that in_memory ignores the count.
        (
            ["--direct_running_mode", "in_memory", "--direct_num_workers", "4"],
            "--direct_running_mode in_memory runs one worker, in this process: "
            "--direct_num_workers 4 asks for more",
        ),
        (
            ["--input_dir", "file:///srv/photos"],
            "--input_dir file:///srv/photos: no Apache Beam file system for file:// is "
            "installed: name the local path without file:// (/srv/photos)",
        ),
        (
            ["--input_dir", "hdfs://namenode/tree"],
            "--input_dir hdfs://namenode/tree: no Apache Beam file system for hdfs:// is "
            "installed: pip install 'apache-beam[hadoop]'",
        ),
        (
            ["--splits", "val", "--duplicates", "fail"],
            "--duplicates fail acts on held-out copies of training images; the splits this "
            "build writes (val) hold no training split (train, or VOC's trainval): "
            "--duplicates report finds",
        ),
        # Beam's s3:// file system is there, but set up to reach nothing (was exit 1, its error).
        (
            ["--output_dir", "s3://b/out"],
            "--output_dir s3://b/out: Beam's s3:// file system cannot reach it: ",
        ),
        # An IndexError in the build; and a thousand processes started one by one on 2 cores.
        (["--direct_num_workers", "-3"], "--direct_num_workers -3: give 1 to "),
        (["--direct_num_workers", "100000"], "--direct_num_workers 100000: give 1 to "),
    ],
)
def test_a_runner_or_flag_the_build_would_ignore_or_fail_on_is_refused_first(
    tmp_path, capsys, flags, message
):
    if "gs://b/out" in flags and _has_gcs():
        pytest.skip("Beam's gs:// file system is installed here")
    tree = tmp_path / "tree"
    sample_tree.write_tree(str(tree), num_train=4, num_val=2, seed=0)
    out = tmp_path / "out"
    given = {token for token in flags if token.startswith("--")}
    paths = [(flag, str(path)) for flag, path in (("--input_dir", tree), ("--output_dir", out))]
    argv = [token for flag, path in paths if flag not in given for token in (flag, path)]
    assert build_tool.main([*argv, *flags]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        "error: " + message.replace("TREE", str(tree)).replace("OUT", str(out))
    ), error
    assert not out.exists()


def _has_gcs() -> bool:
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem("gs://b/x")
    except ValueError:
        return False
    return True


def test_relative_paths_reach_the_pipeline_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = dataflow.with_absolute_paths(config("--labels_file", "labels.txt"))
    assert (made.input_dir, made.output_dir, made.labels_file) == (
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        str(tmp_path / "labels.txt"),
    )
    remote = BuildConfig("gs://b/tree", "gs://b/out")
    assert dataflow.with_absolute_paths(remote) == remote


def test_a_tilde_the_shell_left_after_an_equals_sign_means_home(tmp_path, monkeypatch):
    # `--output_dir=~/out`: bash does not expand it, and a build made ./~/out.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    argv = ["--input_dir=~/in", "--output_dir=~/out", "--labels_file=~/labels.txt"]
    made = BuildConfig.from_options(PipelineOptions(argv))
    assert (made.input_dir, made.output_dir, made.labels_file) == (
        str(tmp_path / "home/in"),
        str(tmp_path / "home/out"),
        str(tmp_path / "home/labels.txt"),
    )
    inside = BuildConfig.from_options(PipelineOptions(["--input_dir=a~b", "--output_dir=o~"]))
    assert (inside.input_dir, inside.output_dir) == ("a~b", "o~")


def test_a_multi_line_error_is_said_on_one_line():
    error = ValueError(
        "Pipeline has validations errors: \nMissing required option: project.\n"
        "Missing required option: region."
    )
    assert failures.failure_message(error) == (
        "BUILD FAILED: ValueError: Pipeline has validations errors: Missing required option: "
        "project. Missing required option: region.; the traceback is in the log"
    )


def test_an_error_while_reading_the_tree_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    def unreachable(path):
        raise ConnectionError("storage out of reach\nretried 10 times")

    monkeypatch.setattr(pipeline, "has_files", unreachable)
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main(argv) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        "BUILD FAILED: ConnectionError: storage out of reach retried 10 times; the traceback is "
        "in the log"
    )
    assert lines[1].startswith("full log: ")


def test_a_dataflow_job_s_flags_pass_where_the_tree_or_output_is_on_cloud_storage():
    """Beam's Cloud Storage client reads --project: a local build of a gs:// tree may need it."""
    import dataclasses

    from beam_pipeline.runners.dataflow import check_dataflow

    project = PipelineOptions(["--project", "p"])
    with pytest.raises(ValueError, match="--project names a Dataflow job"):
        check_dataflow(project, config())
    for paths in ({"input_dir": "gs://b/tree"}, {"output_dir": "gs://b/out"}):
        check_dataflow(project, dataclasses.replace(config(), **paths))


def test_every_image_policy_field_is_recorded_in_the_metadata():
    # The policy's fields are each shard's --resume fingerprint (dataclasses.asdict), but
    # build_info.json's options list them by hand: a new image flag must be added there too.
    import dataclasses

    from beam_pipeline.core.images import ImagePolicy

    recorded = config("--image_policy", "shorter_side", "--image_size", "256").to_metadata()
    as_recorded = {"keep_stray_jpeg_bytes": "stray_jpeg_bytes", "fingerprints": None}
    fields = {as_recorded.get(f.name, f.name) for f in dataclasses.fields(ImagePolicy)}
    assert fields - {None} <= set(recorded["image_policy"])
    assert recorded["image_policy"]["size"] == [256]
    # (fingerprints: recorded as options.duplicates, the flag that asks for them)
    assert "duplicates" in config("--duplicates", "report").to_metadata()
