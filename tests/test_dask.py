"""Builds on a real `dask.distributed` cluster: 2 worker processes on loopback."""

import collections
import http.server
import json
import os
import pathlib
import signal
import threading
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from dask.distributed import Client, LocalCluster, get_task_stream
from dask.utils import key_split
from helpers import build, dead_letters, ilsvrc_image, jpeg_bytes, write
from test_console import run_cli

from beam_pipeline import failures, pipeline
from beam_pipeline.runners import (
    beam_flags,
    dask_preflight,
    dask_runner,
    dask_translation,
    machine,
)
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import sample_tree
from schemas import BUILD_INFO_FILE

WORKERS = 2


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as local:
        yield local


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A sample tree with a broken image and a broken annotation (rejections in two stages)."""
    root = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(root), num_train=300, num_val=60, seed=11)
    write(root / "Data" / "DET" / "train" / "zz_broken.JPEG", jpeg_bytes()[:300])
    ilsvrc_image(root, "val", "zz_bad_xml", jpeg_bytes(), xml="<annotation><object>")
    return root


def dask_flags(cluster) -> list[str]:
    return ["--runner", "DaskRunner", "--dask_client_address", cluster.scheduler_address]


def files(output_dir) -> dict[str, bytes]:
    """Every file a build left, by relative path (its scratch directory aside)."""
    root = pathlib.Path(output_dir)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".tmp" not in p.relative_to(root).parts
    }


def test_a_build_on_dask_is_byte_identical_and_runs_each_step_once_on_every_worker(
    cluster, tree, tmp_path
):
    flags = ["--num_shards", "train=6,validation=3", "--max_bad_fraction", "0.05"]
    local = build(tree, tmp_path / "local", *flags)
    with Client(cluster) as client, get_task_stream(client) as stream:
        on_dask = build(tree, tmp_path / "dask", *flags, *dask_flags(cluster))
    assert on_dask == local
    assert local.splits["train"].num_examples == 300
    assert local.failures == {"truncated_image": 1, "annotation_malformed": 1}
    built = files(tmp_path / "dask")
    assert built == files(tmp_path / "local")
    assert len([name for name in built if name.endswith(".tfrecord")]) == 9

    ran = collections.Counter(str(task["key"]) for task in stream.data)
    assert [key for key, times in ran.items() if times > 1] == []  # no task computed twice
    steps = collections.Counter(key_split(task["key"]) for task in stream.data)
    partitions = WORKERS * dask_translation.PARTITIONS_PER_THREAD
    for step in ("DiscoverImages-ListSubtrees-ParDo", "WriteShards-WriteShard-ParDo"):
        assert steps[step] == partitions, steps  # each partition once: no recomputation
    writers = {task["worker"] for task in stream.data if "WriteShard-ParDo" in str(task["key"])}
    assert len(writers) == WORKERS


def test_a_failed_check_on_dask_writes_no_shard_and_fails_loudly(cluster, tree, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(Exception) as raised:  # the worker's BuildFailed, re-raised here
        build(tree, out, "--max_bad_fraction", "0", *dask_flags(cluster))
    message = failures.failure_message(raised.value)
    assert message.startswith("BUILD FAILED: 1 of 362 images rejected before any image was read")
    assert not (out / BUILD_INFO_FILE).exists()
    assert list(out.glob("*.tfrecord")) == []
    assert [line["path"] for line in dead_letters(out)] == [
        str(tree / "Annotations" / "DET" / "val" / "zz_bad_xml.xml")
    ]


def test_workers_that_run_other_code_are_refused_naming_what_differs(
    cluster, tree, tmp_path, monkeypatch
):
    # Workers with a copy of the project one line apart wrote other bytes, exit 0 (a Dask
    # trial). Here the launcher stamps one library more than its workers do.
    from beam_pipeline.runners import dask_preflight

    monkeypatch.setattr(dask_preflight, "_LIBRARIES", (*dask_preflight._LIBRARIES, "json"))
    out = tmp_path / "out"
    with pytest.raises(failures.BuildFailed) as raised:
        build(tree, out, *dask_flags(cluster))
    assert str(raised.value).startswith(
        f"BUILD FAILED: the Dask worker {min(cluster.scheduler_info['workers'])} runs other "
        f"code than this machine (json None there, {json.__version__} here): its shards would "
        "differ from a local build's; install the same imagenet-tfrecords and libraries on "
        "every worker"
    )
    assert list(out.glob("*.tfrecord")) == [] and not (out / BUILD_INFO_FILE).exists()


def test_the_code_stamp_is_the_modules_and_the_libraries():
    from beam_pipeline.runners import dask_preflight

    here = dask_preflight.code_stamp()
    assert sorted(here) == [
        "PIL",
        "Python",
        "apache_beam",
        "imagenet-tfrecords modules",
        "numpy",
        "simplejpeg",
    ]
    assert dask_preflight.other_code({"tcp://a": dict(here), "tcp://c": OSError()}, here) is None
    one_line_apart = {**here, "imagenet-tfrecords modules": "0" * 16}
    said = dask_preflight.other_code({"tcp://b": here, "tcp://a": one_line_apart}, here)
    assert said.startswith(
        f"the Dask worker tcp://a runs other code than this machine (imagenet-tfrecords "
        f"modules 0000000000000000 there, {here['imagenet-tfrecords modules']} here)"
    )


@pytest.mark.slow
def test_the_command_line_takes_the_short_name_and_says_where_it_ran(cluster, tree, tmp_path):
    out = tmp_path / "out"
    argv = ["--input_dir", tree, "--output_dir", out, "--max_bad_fraction", "0.05"]
    result = run_cli(
        [*argv, "--runner", "daskrunner", "--dask_client_address", cluster.scheduler_address],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    workers = f"{WORKERS} workers, {WORKERS} threads"
    assert f"on the Dask cluster at {cluster.scheduler_address} ({workers})" in result.stdout
    assert (out / BUILD_INFO_FILE).exists()


def test_side_inputs_and_tagged_outputs_reach_the_right_consumers(cluster):
    def split(n):
        yield n if n % 2 == 0 else beam.pvalue.TaggedOutput("odd", n)

    argv = dask_flags(cluster)
    argv[1] = beam_flags.resolve_runner(argv[1])
    with beam.Pipeline(options=PipelineOptions(argv)) as p:
        numbers = p | beam.Create(range(20))
        parts = numbers | beam.ParDo(split).with_outputs("odd", main="even")
        total = parts.odd | "SumOdd" >> beam.CombineGlobally(sum)
        shifted = parts.even | "Shift" >> beam.Map(
            lambda n, offset: n + offset, offset=beam.pvalue.AsSingleton(total)
        )
        assert_that(shifted, equal_to([n + 100 for n in range(0, 20, 2)]))
        assert_that(parts.odd, equal_to(list(range(1, 20, 2))), label="Odd")


def test_a_step_it_cannot_translate_is_refused_by_name(cluster):
    argv = ["--runner", beam_flags.DASK_RUNNER, "--dask_client_address", cluster.scheduler_address]
    refused = pytest.raises(NotImplementedError, match=r"cannot run step 'Tick' \(Impulse\)")
    with refused, beam.Pipeline(options=PipelineOptions(argv)) as p:
        p | "Tick" >> beam.Impulse()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_an_address_where_no_scheduler_answers_is_refused_before_anything_is_written(
    cluster, tree, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--runner", "DaskRunner"]
    address = "--dask_client_address"
    refused = "error: cannot reach the Dask scheduler at {} (--dask_client_address): {}\n"
    hint = "; give the scheduler's address (`dask scheduler` prints it)"
    # Nothing listens: refused at once (Dask's client would have retried for 30 s).
    assert build_tool.main([*argv, address, "tcp://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err == refused.format(
        "tcp://127.0.0.1:9",
        "Connection refused; start it (`dask scheduler`) or correct the address",
    )
    # A web server: Dask's client failed with a MemoryError reading its reply as a frame.
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), QuietHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        web_address = f"tcp://127.0.0.1:{web.server_address[1]}"
        assert build_tool.main([*argv, address, web_address, "--dask_connection_timeout", "2"]) == 2
    finally:
        web.shutdown()
    assert capsys.readouterr().err == refused.format(
        web_address,
        f"something accepts connections there but does not answer as a Dask server{hint}",
    )
    # One of the cluster's workers.
    worker = next(iter(cluster.scheduler_info["workers"]))
    assert build_tool.main([*argv, address, worker]) == 2
    assert capsys.readouterr().err == refused.format(
        worker, f"a Dask worker answers there, not the scheduler{hint}"
    )
    # A timeout with a unit: Beam's parse gives a marker object, which crashed the probe and
    # then stood for Dask's default; -5 failed late ("could not convert string to float").
    for timeout in ("2s", "abc", "-5"):
        assert build_tool.main([*argv, address, worker, "--dask_connection_timeout", timeout]) == 2
        assert capsys.readouterr().err == (
            "error: --dask_connection_timeout: give whole seconds above 0 (e.g. 30); Beam "
            "reads no other form\n"
        )
    # -3 partitions: a build that wrote nothing and failed reading its own metadata.
    for flag, value in (("--dask_npartitions", "-3"), ("--dask_partition_size", "0")):
        assert build_tool.main([*argv, address, worker, flag, value]) == 2
        assert capsys.readouterr().err == f"error: {flag} {value}: give a whole number above 0\n"
    # A mistyped scheme: the build made the output directory, failed (exit 1), then hung 60 s.
    assert build_tool.main([*argv, address, "tccp://127.0.0.1:8786"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: --dask_client_address tccp://127.0.0.1:8786: unknown address scheme 'tccp' "
        "(Dask's: inproc, tcp, tls, "
    )
    # A scheduler file that is not there: Dask waited for it without end, Ctrl-C or not.
    missing = tmp_path / "scheduler.json"
    assert build_tool.main([*argv, "--dask_scheduler_file", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: --dask_scheduler_file {missing} does not exist (Dask would wait for it without "
        f"end): start the scheduler first, `dask scheduler --scheduler-file {missing}`, or give "
        "its address with --dask_client_address\n"
    )
    assert build_tool.main([*argv, address, "tcp://127.0.0.1:port"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: --dask_client_address tcp://127.0.0.1:port: not a scheduler address ("
    )
    # Empty (`--dask_client_address=$SCHED`, unset): Dask failed on LocalCluster's arguments.
    assert build_tool.main([*argv, f"{address}="]) == 2
    assert capsys.readouterr().err == (
        "error: --dask_client_address is empty (an unset shell variable?): give the "
        "scheduler's tcp://HOST:PORT, or leave the flag out to start a cluster on this machine\n"
    )
    assert not out.exists()


@pytest.mark.slow
def test_its_own_local_cluster_has_one_single_threaded_worker_per_core(tree, tmp_path, monkeypatch):
    # Dask's default would put several threads in each process past 4 cores (4 x 4 on 16),
    # and the image work is Python, so threads of one process share a GIL.
    monkeypatch.setattr(machine, "available_cores", lambda: 3)
    info = build(tree, tmp_path / "out", "--runner", "DaskRunner")
    assert dask_runner.last_cluster == (None, 3, 3)
    assert info.splits["train"].num_examples > 0


@pytest.mark.slow
def test_relative_paths_name_the_launchers_tree_on_the_workers(
    cluster, tree, tmp_path, monkeypatch
):
    # The workers run in directories of their own: the build gives them absolute paths.
    build(tree, tmp_path / "local", "--max_bad_fraction", "0.05")
    expected = files(tmp_path / "local")
    monkeypatch.chdir(tree.parent)
    relative = ["--input_dir", tree.name, "--output_dir", "out_rel", "--max_bad_fraction", "0.05"]
    pipeline.run([*relative, *dask_flags(cluster)])
    assert files(tree.parent / "out_rel") == expected


def test_a_cluster_without_workers_is_refused(tree, tmp_path, monkeypatch):
    monkeypatch.setattr(dask_preflight, "NO_WORKERS_SECONDS", 2)
    empty = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None)
    flags = ["--runner", "DaskRunner", "--dask_client_address", empty.scheduler_address]
    with empty, pytest.raises(ConnectionError) as raised:
        build(tree, tmp_path / "out", *flags)
    assert str(raised.value).startswith(
        f"the Dask cluster at {empty.scheduler_address} has no worker for 2 s: start some"
    )


def test_a_build_whose_workers_all_died_fails_loudly(monkeypatch):
    monkeypatch.setattr(dask_preflight, "NO_WORKERS_SECONDS", 2)
    local = LocalCluster(
        n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    )
    with local, Client(local, set_as_default=False) as client:
        slow = client.submit(time.sleep, 600, pure=False)
        result = dask_runner.DaskRunnerResult(client, [slow], local.scheduler_address)
        local.scale(0)
        with pytest.raises(dask_runner.BuildFailed) as raised:
            result.wait_until_finish()
    assert failures.failure_message(raised.value).startswith(
        f"BUILD FAILED: the Dask cluster at {local.scheduler_address} has had no worker for 2 s"
    )


def test_a_builds_only_sink_is_its_commit(cluster, tree, tmp_path, monkeypatch):
    # Unread outputs of steps that also feed others (the writers' prints without --duplicates,
    # the listing's subdirectories) were sinks: held to the end, a worker lost after the commit
    # had the shard writers run again, into a committed build.
    sinks = []
    find_sinks = dask_translation.Translator.sinks

    def recorded(translator):
        bags = find_sinks(translator)
        names = {bag.name for bag in bags}
        sinks.extend(
            p.producer.full_label for p, bag in translator.bags.items() if bag.name in names
        )
        return bags

    monkeypatch.setattr(dask_translation.Translator, "sinks", recorded)
    build(tree, tmp_path / "out", "--max_bad_fraction", "0.05", *dask_flags(cluster))
    assert sinks == ["Finalize/Commit"]


def _effect(path):
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\n")


def test_a_finished_sink_is_not_computed_again_when_its_worker_is_lost(tmp_path):
    # The result of a finished sink is let go: a worker lost later (a nanny's restart for
    # memory) then has nothing of it to compute again; held, its steps ran a second time.
    effects = tmp_path / "effects.txt"
    local = LocalCluster(
        n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    )
    with local, Client(local, set_as_default=False) as client:
        first, second = list(client.nthreads())
        futures = [
            client.submit(
                _effect, str(effects), pure=False, workers=[first], allow_other_workers=True
            ),
            client.submit(time.sleep, 4, pure=False, workers=[second]),
        ]
        result = dask_runner.DaskRunnerResult(client, futures, local.scheduler_address)
        del futures

        def kill_the_first_when_done():
            while not effects.exists():
                time.sleep(0.05)
            time.sleep(1)  # the result has been let go of (polled every 0.2 s)
            os.kill(int(effects.read_text()), signal.SIGKILL)

        killer = threading.Thread(target=kill_the_first_when_done)
        killer.start()
        assert result.wait_until_finish() == "DONE"
        killer.join()
    assert len(effects.read_text().split()) == 1


def test_held_out_splits_on_dask_are_the_local_ones(cluster, tree, tmp_path):
    # --validation_split divides per class by a hash of the file names: the same on any runner.
    flags = ["--splits", "train", "--validation_split", "0.25", "--max_bad_fraction", "0.05"]
    local = build(tree, tmp_path / "local", *flags)
    on_dask = build(tree, tmp_path / "dask", *flags, *dask_flags(cluster))
    assert on_dask == local and local.splits["validation"].num_examples > 0
    assert files(tmp_path / "dask") == files(tmp_path / "local")


@pytest.mark.parametrize("policy", ["report", "drop_leaks"])
def test_copies_found_on_dask_are_the_local_ones(cluster, tree, tmp_path, policy):
    # --duplicates groups the prints on the runner (and drop_leaks hands the training ones to
    # the other splits' writers): on Dask, the same duplicates.jsonl and rejected.jsonl.
    flags = ["--duplicates", policy, "--max_bad_fraction", "0.05", "--num_shards", "3"]
    local = build(tree, tmp_path / "local", *flags)
    on_dask = build(tree, tmp_path / "dask", *flags, *dask_flags(cluster))
    assert on_dask == local and local.duplicates["images"] > 0
    assert local.duplicates.get("dropped", {}).get("validation", 0) == (
        4 if policy == "drop_leaks" else 0
    )
    assert files(tmp_path / "dask") == files(tmp_path / "local")
