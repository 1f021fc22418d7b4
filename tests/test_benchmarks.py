"""Smoke tests of `benchmarks/`: every script runs for real on a tiny tree and prints its tables.

Nothing is timed here (figures belong in benchmarks/RESULTS.md, taken on full-size trees): each
test runs a script as a user does, `python -m benchmarks.<name>` from the repository root, with
the smallest arguments that still go through all of its code, and checks that it exits cleanly
and prints the rows and columns it promises, or writes the files it promises.
"""

from __future__ import annotations

import filecmp
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from beam_pipeline.runners.machine import available_cores
from schemas.tfrecord import read_records

ROOT = pathlib.Path(__file__).resolve().parent.parent
SMALL, LARGE = 24, 48
OURS = "ours, multi_processing x2"
LIMIT = "limit: Pillow image work alone (full decode), 2 processes, bytes in memory"
NUMBER = re.compile(r"-?\d+(\.\d+)?%?")


def run_benchmark(name: str, *args, env: dict | None = None, check: bool = True):
    """Runs `python -m benchmarks.<name> ARGS` from the repository root."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *map(str, args)],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def tables(output: str) -> list[dict[str, list[str]]]:
    """Each Markdown table in `output`, in order: {first cell: the other cells}, header included."""
    found, current = [], None
    for line in output.splitlines():
        if not line.startswith("|"):
            current = None
        elif not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if current is None:
                current = {}
                found.append(current)
            current[cells[0]] = cells[1:]
    return found


def assert_numbers(cells: list[str], allow_missing: bool = False) -> None:
    for cell in cells:
        assert NUMBER.fullmatch(cell) or (allow_missing and cell == "-"), cells


def perf_can_sample() -> bool:
    """Whether `perf record` may sample other processes here (what profile_build checks)."""
    if shutil.which("perf") is None:
        return False
    paranoid = pathlib.Path("/proc/sys/kernel/perf_event_paranoid")
    return os.geteuid() == 0 or not paranoid.exists() or int(paranoid.read_text()) <= 1


def jpegs(tree: pathlib.Path) -> list[pathlib.Path]:
    return sorted(tree.rglob("*.JPEG"))


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict:
    """{"small": path, "large": path, "printed": make_tree's outputs}: the same seed, two sizes."""
    root = tmp_path_factory.mktemp("bench")
    made = {"printed": {}}
    for name, size in (("small", SMALL), ("large", LARGE)):
        made[name] = root / f"tree{size}"
        done = run_benchmark("make_tree", made[name], "--num_images", size)
        made["printed"][name] = done.stdout
    return made


@pytest.fixture(scope="module")
def built(trees, tmp_path_factory) -> pathlib.Path:
    """The large tree built by the project's own CLI, for the loader benchmarks."""
    out = tmp_path_factory.mktemp("built")
    flags = ["--splits", "train", "--num_shards", "2", "--direct_running_mode", "in_memory"]
    dirs = ["--input_dir", trees["large"], "--output_dir", out]
    subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *dirs, *flags],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return out


def test_make_tree_writes_a_deterministic_prefix_of_the_larger_tree(trees):
    assert re.fullmatch(rf"{SMALL} images, mean \d+ KB, in .*\n", trees["printed"]["small"])
    small, large = jpegs(trees["small"]), jpegs(trees["large"])
    assert (len(small), len(large)) == (SMALL, LARGE)
    assert list(trees["small"].rglob("*.xml"))
    for path in small:  # the small tree is the first images of the large one, byte for byte
        twin = trees["large"] / path.relative_to(trees["small"])
        assert filecmp.cmp(path, twin, shallow=False)


def test_make_tree_distinct_pictures_are_no_near_copies(trees, tmp_path):
    # --distinct: every image a picture of its own, where the photos' crops hash alike.
    from beam_pipeline.core.images import ImagePolicy, normalise_image
    from beam_pipeline.core.quality import fingerprints as fp

    def hashes(tree):
        policy = ImagePolicy(fingerprints=True)
        found = [normalise_image(path.read_bytes(), policy).fingerprint for path in jpegs(tree)]
        return [f.perceptual for f in found if f.luma_spread > fp.UNIFORM_SPREAD]

    def near_pairs(values):
        return sum(fp.hamming(a, b) <= 6 for i, a in enumerate(values) for b in values[i + 1 :])

    run_benchmark("make_tree", tmp_path / "distinct", "--num_images", SMALL, "--distinct")
    distinct = hashes(tmp_path / "distinct")
    assert len(distinct) == SMALL  # (no blank picture among them)
    assert near_pairs(distinct) == 0 and near_pairs(hashes(trees["small"])) > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, flags",
    [("naive", []), ("nproc", ["--resize"]), ("beam_gbk", []), ("beam_gbk_defaults", [])],
)
def test_baseline_builds_write_every_image_into_16_shards(trees, tmp_path, kind, flags):
    run_benchmark("baselines", kind, trees["small"], tmp_path, *flags)
    shards = sorted(tmp_path.glob("train-*-of-00016*"))
    assert len(shards) == 16
    records = 0
    for shard in shards:
        with open(shard, "rb") as f:
            records += sum(1 for _ in read_records(f))
    assert records == SMALL


@pytest.mark.slow
def test_the_n_process_writer_spreads_16_shards_over_n_processes(trees, tmp_path):
    # 3 processes: shards 0, 3, ..., 15 from the first, ...; every image once in 16 shards.
    run_benchmark("baselines", "nproc", trees["small"], tmp_path, "--processes", 3)
    shards = sorted(tmp_path.glob("train-*-of-00016*"))
    records = []
    for shard in shards:
        with open(shard, "rb") as f:
            records += list(read_records(f))
    assert len(shards) == 16
    assert len(records) == SMALL and len(set(records)) == SMALL


@pytest.mark.parametrize("flags", [[], ["--resize"], ["--processes", "3"]])
def test_limit_baseline_reports_its_work_time(trees, tmp_path, flags):
    done = run_benchmark("baselines", "limit", trees["small"], tmp_path, *flags)
    assert re.search(r"^work_seconds=\d+\.\d+$", done.stdout, re.M), done.stdout


@pytest.mark.slow
def test_build_benchmark_prints_a_row_per_contender(trees):
    done = run_benchmark(
        "build_benchmark", trees["small"], trees["large"], "--contenders", f"{OURS};{LIMIT}"
    )
    (rows,) = tables(done.stdout)
    assert rows["contender"] == [
        f"{SMALL} imgs s",
        f"{LARGE} imgs s",
        "marginal img/s",
        f"peak MiB {SMALL}",
        f"peak MiB {LARGE}",
        "mem ratio",
        "ours / this",
    ]
    assert set(rows) == {"contender", OURS, LIMIT}
    for name in (OURS, LIMIT):
        cells = rows[name]
        assert_numbers(cells[0:2] + cells[3:6])  # seconds, peak memory, memory ratio
        # On trees this small the larger may not take longer: then there is no rate ("-").
        assert_numbers([cells[2], cells[6]], allow_missing=True)
    assert rows[OURS][6] in {"1.00", "-"}
    assert done.stdout.endswith(f"\nours: {OURS}\n")


def test_build_benchmark_refuses_unknown_contenders_before_building(trees):
    done = run_benchmark(
        "build_benchmark", trees["small"], trees["large"], "--contenders", "ours", check=False
    )
    assert done.returncode == 2
    assert "unknown contenders ['ours']" in done.stderr
    # --workers N names the N-worker contenders; the 2-worker names are then unknown.
    args = (trees["small"], trees["large"], "--workers", 16, "--contenders", OURS)
    done = run_benchmark("build_benchmark", *args, check=False)
    assert done.returncode == 2
    assert "'ours, multi_processing x16', 'baseline: naive single loop', " in done.stderr
    assert "'baseline: hand-written 16-process writer'" in done.stderr


def test_profile_build_without_perf_says_what_to_install(trees, tmp_path):
    # An empty PATH hides perf; the interpreter is started by its absolute path.
    done = run_benchmark(
        "profile_build", trees["small"], trees["large"], env={"PATH": str(tmp_path)}, check=False
    )
    assert done.returncode == 2
    assert "needs Linux perf on the PATH" in done.stderr
    assert "apt-get install linux-perf" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not perf_can_sample(), reason="Linux perf is absent or may not sample")
def test_profile_build_splits_the_marginal_cpu_by_library(trees):
    # The limit with --resize: the cheapest contender with real image work per image.
    done = run_benchmark(
        "profile_build", trees["small"], trees["large"], "--contender", LIMIT, "--resize"
    )
    (rows,) = tables(done.stdout)
    assert rows["where (by library)"] == ["CPU ms per image (marginal)", "share"]
    assert "JPEG decode (libjpeg-turbo)" in rows
    assert rows["total"][1] in {"100%", "-"}
    for name, (ms, share) in rows.items():
        if name != "where (by library)":
            # On trees this small, start-up noise may outweigh the extra images: no shares.
            assert_numbers([ms])
            assert_numbers([share], allow_missing=True)
    busy = r"^All \d+ cores busy on this work would build \d+ images/s\.$"
    too_close = "The larger tree took no more CPU: the trees are too close in size to tell."
    assert re.search(busy, done.stdout, re.M) or too_close in done.stdout


@pytest.mark.slow
def test_loader_benchmark_prints_every_loader_and_fit(trees, built):
    done = run_benchmark(
        "loader_benchmark",
        built,
        "--tree",
        trees["large"],
        *("--batch_size", 8, "--batches", 2, "--repeats", 1, "--fit_repeats", 1),
        *("--image_size", 96),
    )
    loops, cpu, fits = tables(done.stdout)
    loaders = [
        "decode limit (bytes in memory)",
        "ours (eval)",
        "ours (train)",
        "ours (eval), dct_scaling=True",
        "ours (train), dct_scaling=True",
        "ours (eval), uint8",
        "ours (train), uint8",
        "ours (train), uint8, detection",
        "ours (eval), cached",
        "ours (train), cached",
        "baseline: Keras PyDataset + Pillow, defaults (workers=1)",
        "baseline: Keras PyDataset + Pillow, workers=2 (threads)",
        "baseline: from_generator + py_function (Pillow)",
        "baseline: tf.data over the raw JPEG files",
    ]
    assert list(loops)[1:] == loaders
    assert loops[next(iter(loops))] == ["images/s", "vs decode limit", "ours (train) / this"]
    assert list(cpu) == ["CPU time per image (whole process)", *loaders]
    for name in loaders:
        assert_numbers(loops[name] + cpu[name])
    assert list(fits) == [
        "model.fit, small CNN",
        "fit small CNN, fed by ours (train)",
        "fit small CNN, fed by the decode limit",
        "fit small CNN, fed by the Keras PyDataset (workers=2)",
        "fit small CNN, one cached batch",
        "fit small CNN + normalization layer, fed by ours (train, uint8)",
    ]
    for cells in list(fits.values())[1:]:
        assert_numbers(cells)
    assert fits["fit small CNN, one cached batch"][1] == "1.00"
    for mode in ("eval", "train"):
        line = rf"^ours \({mode}\), uint8 / float32: [\d.]+ \(images/s\), [\d.]+ \(CPU"
        assert re.search(line, done.stdout, re.M)
        line = rf"^ours \({mode}\), DCT-scaled decode: CPU per image [\d.]+x less$"
        assert re.search(line, done.stdout, re.M)
    assert "loader into a consumer loop, 96x96, batch 8" in done.stdout
    for name in ("ours (eval)", "ours (train)"):
        line = rf"^{re.escape(name)} / decode limit, round by round: [\d.]+$"
        assert re.search(line, done.stdout, re.M)


@pytest.mark.slow
def test_input_bound_benchmark_says_whether_the_model_waits(built):
    done = run_benchmark(
        "input_bound_benchmark",
        built,
        *("--model", "small", "--batch_size", 8, "--steps", 2, "--repeats", 1, "--service", 2),
        *("--image_size", 96),
    )
    (rows,) = tables(done.stdout)
    header = ["loader alone", "fit, fed", "fit, cached", "fed / cached"]
    assert rows["small 96px, batch 8"] == header
    ways = ["float32", "uint8 + normalization layer", "uint8, tf.data service"]
    assert list(rows)[1:] == ways
    for name in ways:
        assert_numbers(rows[name])
        verdict = rf"^{re.escape(name)}: the model (waits|does not wait) on input \(fed at [\d.]+ "
        assert re.search(verdict, done.stdout, re.M)
    device = (
        r"^device: .*; model: small at 96x96, batch 8, mixed precision: (on|off); "
        r"tf.data service: 2$"
    )
    assert re.search(device, done.stdout, re.M)


@pytest.mark.slow
def test_input_bound_benchmark_feeds_dali_and_times_the_wait_for_it(built):
    # DALI on its CPU backend here; with JAX, Keras takes its batches through a PyDataset that
    # counts how long fit waits for each.
    done = run_benchmark(
        "input_bound_benchmark",
        built,
        *("--model", "small", "--batch_size", 8, "--steps", 2, "--repeats", 1, "--dali"),
        *("--dali_row", "hw_decoder_load=1", "--dali_row", "handoff=plugin,prefetch_batches=3"),
        "--no_float32",
        env={"KERAS_BACKEND": "jax"},
    )
    (rows,) = tables(done.stdout)
    dali = [
        "uint8, DALI",
        "uint8, DALI, evaluation pipeline",
        "uint8, DALI, hw_decoder_load=1",
        "uint8, DALI, handoff=plugin,prefetch_batches=3",
    ]
    assert list(rows)[1:] == ["uint8 + normalization layer", *dali]
    for name in dali:
        assert_numbers(rows[name])
        wait = rf"^{re.escape(name)}: fit waited [\d.]+ ms per batch for DALI \(a fed step: "
        assert re.search(wait + r"[\d.]+ ms\)$", done.stdout, re.M)
    assert "Keras backend: jax" in done.stdout


@pytest.mark.parametrize("name", ["efficientnetv2b0", "mobilenetv3large"])
def test_the_feed_benchmarks_small_models_take_pixels_at_any_size(name):
    from benchmarks.input_bound_benchmark import build_model

    model = build_model(name, 5, uint8=True, size=(64, 96))
    assert model.input.dtype == "uint8" and tuple(model.input.shape) == (None, 64, 96, 3)
    assert model.layers[1].name == "normalization"  # the loader's layer, then the backbone
    pixels = np.random.default_rng(0).integers(0, 256, (2, 64, 96, 3), np.uint8)
    scores = model.predict(pixels, verbose=0)
    assert scores.shape == (2, 5)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-5)


def test_dali_rows_are_parsed_or_refused_by_name():
    from benchmarks.input_bound_benchmark import dali_row

    text = "hw_decoder_load=0.65,prefetch_batches=16,training=0,handoff=plugin"
    assert dali_row(text) == (
        text,
        {"hw_decoder_load": 0.65, "prefetch_batches": 16, "training": 0, "handoff": "plugin"},
    )
    for bad, message in [
        ("training=false", "training must be 0 or 1, not 'false'"),
        ("training=0.5", "training must be 0 or 1, not '0.5'"),
        ("handoff=Plugin", "handoff must be loader or plugin, not 'Plugin'"),
        ("prefetch_batches=4,prefetch_batches=8", "prefetch_batches given twice in "),
        ("hw_decoder_load", "'hw_decoder_load' is not KEY=VALUE"),
    ]:
        with pytest.raises(Exception, match=re.escape(message)):
            dali_row(bad)


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["local", "dask"])
def test_scaling_benchmark_splits_cpu_between_coordinator_and_workers(trees, runner):
    # These trees are small enough that the plain CLI would build them in one process; a Dask
    # build starts a LocalCluster of one worker process per core (here 2).
    flags = ["--workers", "2"] if runner == "local" else ["--runner", "dask"]
    done = run_benchmark("scaling", trees["small"], trees["large"], "--repeats", "1", *flags)
    (rows,) = tables(done.stdout)
    assert rows["tree"] == [
        "images",
        "wall s",
        "coordinator CPU s",
        "worker CPU s",
        "worker busy",
        "imbalance",
        "CPU sampled",
    ]
    assert [rows[name][0] for name in ("tiny", "small", "large")] == ["20", str(SMALL), str(LARGE)]
    for name in ("tiny", "small", "large"):
        wall, coordinator, workers, busy, imbalance, sampled = rows[name][1:]
        assert_numbers([wall, coordinator, imbalance, sampled])
        # Each worker process sampled: the 2 asked for; the LocalCluster's one per core.
        expected = 2 if runner == "local" else available_cores()
        assert len(workers.split(" / ")) == len(busy.split(" / ")) == expected
        assert_numbers(workers.split(" / ") + busy.split(" / "))
    assert "serial fraction f: " in done.stdout or "marginal figures: -" in done.stdout


def test_scaling_benchmark_refuses_a_worker_count_for_dask(trees):
    done = run_benchmark(
        "scaling", trees["small"], trees["large"], "--runner", "dask", "--workers", "2", check=False
    )
    assert done.returncode == 2
    assert "--workers sizes the local runner" in done.stderr


@pytest.mark.slow
def test_index_scale_benchmark_indexes_every_synthetic_entry(tmp_path):
    done = run_benchmark("index_scale", tmp_path, "--sizes", "1000")
    (rows,) = tables(done.stdout)
    assert rows["entries"] == ["wall s", "entries/s", "peak MiB", "labelled per split"]
    wall, rate, peak, counts = rows["1,000"]
    assert_numbers([wall, rate.replace(",", ""), peak.replace(",", "")])
    # ImageNet's shape: 96.2% train in synset folders, the rest a flat val, every entry labelled.
    assert json.loads(counts) == {"train": 962, "validation": 38}
    tree = tmp_path / "tree-1000"
    assert len(list(tree.glob("Data/CLS-LOC/train/*/*.JPEG"))) == 962
    assert len(list(tree.glob("Annotations/CLS-LOC/train/*/*.xml"))) == 409  # 42.5%
    assert len(list(tree.glob("Annotations/CLS-LOC/val/*.xml"))) == 38


@pytest.mark.slow
def test_dask_benchmark_compares_builds_on_a_cluster_with_the_local_build(trees):
    done = run_benchmark(
        "dask_benchmark", trees["small"], trees["large"], "--workers", "2", "--no_own_cluster"
    )
    (rows,) = tables(done.stdout)
    local = "local: plain CLI (every core)"
    dask = "dask: --runner DaskRunner --dask_client_address (running cluster)"
    assert list(rows) == ["contender", local, dask]
    assert rows["contender"][:2] == [f"{SMALL} imgs s", f"{LARGE} imgs s"]
    for name in (local, dask):
        assert_numbers(rows[name], allow_missing=True)
    assert rows[local][3:] == ["1.00", "1.00"] or rows[local][3] == "-"
    assert "2 Dask workers x 1 thread" in done.stdout
    assert done.stdout.strip().endswith("byte-identical to the local build: yes")


@pytest.mark.slow
def test_loader_stages_benchmark_prints_each_stage(built):
    done = run_benchmark(
        "loader_stages", built, *("--images", 16, "--batch_size", 8, "--repeats", 1)
    )
    (rows,) = tables(done.stdout)
    assert list(rows) == [
        "pipeline",
        "read + CRC",
        "+ parse",
        "+ decode",
        "+ resize",
        "+ batch",
        "decode at 1/2 (DCT scaling)",
        "ours (eval)",
        "ours (eval), uint8",
        "ours (train)",
        "ours (train), uint8",
    ]
    assert rows["pipeline"] == ["CPU ms / image", "stage's CPU ms / image", "images/s"]
    for name, cells in list(rows.items())[1:]:
        assert_numbers(cells, allow_missing=True)
        assert (cells[1] == "-") == (not name.startswith(("read", "+"))), name
    assert ": 16 images, 224x224, medians of 1 rounds" in done.stdout


@pytest.mark.slow
def test_a_loader_benchmark_on_a_folder_that_is_no_build_says_so(tmp_path):
    # It ended in a traceback of IncompleteDatasetError.
    done = run_benchmark("loader_stages", tmp_path / "missing", check=False)
    assert done.returncode == 2
    assert done.stderr.endswith(
        f"loader_stages.py: error: {tmp_path}/missing does not exist: data_dir is the "
        "--output_dir of a build, a directory\n"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_near_duplicates_benchmark_finds_every_planted_copy_at_the_default_radius():
    done = run_benchmark(
        "near_duplicates",
        *("--tree_copies", 3, "--bench_images", 10, "--repeats", 1, "--search_sizes", 20000),
        *("--crowd", 300, "--max_run", 200),
    )
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| 20,000 ")]
    # Without a crowd every planted copy within the radius is found (recall 1.0000).
    plain = [row for row in rows if "identical" not in row[1]]
    assert [row[2].strip() for row in plain] == ["4", "5", "6"]
    assert {row[6].strip() for row in plain} == {"1.0000"}
