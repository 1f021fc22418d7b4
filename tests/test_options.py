import os
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

from beam_pipeline.cli import tune_malloc
from beam_pipeline.options import BuildConfig, parse_image_size, parse_num_shards
from beam_pipeline.pipeline import pipeline_options


def config(*args):
    return BuildConfig.from_options(
        PipelineOptions(["--input_dir", "in", "--output_dir", "out", *args])
    )


def test_defaults():
    c = config()
    assert c.splits == ("train", "val")
    assert c.num_shards is None and c.seed == 0 and c.image_policy.mode == "original"
    assert c.max_bad_fraction == 0.01 and c.overwrite is False


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
