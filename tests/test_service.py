"""`load_dataset(..., service=...)`: a real tf.data service (dispatcher + 2 workers) on loopback."""

import collections
import hashlib
import http.server
import os
import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import build_sample

tf = pytest.importorskip("tensorflow")

from loaders import ReadConfig, load_dataset  # noqa: E402
from loaders.service import (  # noqa: E402
    checked_service,
    host_name,
    start_dispatcher,
    start_worker,
    worker_address,
)

SIZE = (32, 32)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return str(build_sample(tmp_path_factory, 90, 25, seed=4, num_shards="train=4,val=2"))


_SERVERS: list = []


@pytest.fixture(scope="module")
def service():
    dispatcher = start_dispatcher()
    # Never stopped, nor collected (which stops them): a worker's stop waits for its tasks of
    # datasets still referenced somewhere, 7-48 s measured at the module's end. The servers
    # end with the test process.
    _SERVERS.extend([dispatcher, *(start_worker(dispatcher.target) for _ in range(2))])
    yield dispatcher.target


def digests(dataset) -> collections.Counter:
    """Each image's digest and label, counted, over one pass of `dataset`."""
    found = collections.Counter()
    for images, labels in dataset:
        for image, label in zip(images.numpy(), labels.numpy(), strict=True):
            found[hashlib.sha1(image.tobytes()).hexdigest(), int(label)] += 1
    return found


def test_one_epoch_through_the_service_yields_every_record_once(built, service):
    kwargs = {"batch_size": 8, "image_size": SIZE, "label_mode": "int", "dtype": "uint8"}
    local = load_dataset(built, "train", **kwargs)
    remote = load_dataset(built, "train", service=service, **kwargs)
    assert remote.cardinality().numpy() == local.cardinality().numpy() == 12  # 90 → 11 x 8 + 2
    expected = digests(local)
    assert sum(expected.values()) == 90
    for _ in range(2):  # each epoch is a new job over all the shards
        assert digests(remote) == expected


def test_training_through_the_service_drops_only_the_remainder(built, service):
    config = ReadConfig(random_crop=False, random_flip=False)  # deterministic images
    kwargs = {"batch_size": 16, "image_size": SIZE, "label_mode": "int", "config": config}
    every = digests(load_dataset(built, "train", **kwargs))
    remote = load_dataset(built, "train", training=True, seed=0, service=service, **kwargs)
    assert remote.cardinality().numpy() == 5
    seen = digests(remote)
    assert sum(seen.values()) == 80  # 90 // 16 batches of 16
    assert max(seen.values()) == 1 and set(seen) <= set(every)


def test_a_relative_data_dir_reaches_the_workers_as_the_build_it_names(
    built, service, tmp_path, monkeypatch
):
    # The workers open the shards in their own working directory. In-process ones share this
    # process's, so it moves before the first epoch: the relative path then names nothing
    # (the workers failed with "shard out/... is missing"), as on another machine.
    kwargs = {"batch_size": 8, "image_size": SIZE, "label_mode": "int", "dtype": "uint8"}
    expected = digests(load_dataset(built, "train", **kwargs))
    monkeypatch.chdir(os.path.dirname(built))
    remote = load_dataset(os.path.basename(built), "train", service=service, **kwargs)
    monkeypatch.chdir(tmp_path)
    assert not os.path.exists(os.path.basename(built))
    for _ in range(2):
        assert digests(remote) == expected


def test_a_bad_or_silent_service_address_is_refused(built):
    with socket.socket() as probe:  # a free port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionError, match=rf"dispatcher at 127\.0\.0\.1:{port}: nothing answ"):
        load_dataset(built, "train", batch_size=8, service=f"grpc://127.0.0.1:{port}")
    for bad in ("http://h:1", "host", "grpc://h:port"):
        with pytest.raises(ValueError, match="service must be 'grpc://host:port'"):
            checked_service(bad)


@pytest.mark.parametrize(
    "pipelines",
    [2, pytest.param(3, marks=pytest.mark.slow), pytest.param(5, marks=pytest.mark.slow)],
)
def test_input_pipelines_behind_the_service_read_each_record_once(built, service, pipelines):
    # Two pipelines share the 4 train shards: each reads its own 2 through the service. Three
    # read one each and a third of the fourth's records; five, a fifth of each shard's. (A
    # `shard` after the source picked from each service worker's part: records twice and
    # none, so those were refused.)
    kwargs = {"batch_size": 8, "image_size": SIZE, "label_mode": "int", "dtype": "uint8"}
    expected = digests(load_dataset(built, "train", **kwargs))
    for _ in range(3 if pipelines == 2 else 1):  # the workers take the shards in any order
        seen = collections.Counter()
        for index in range(pipelines):
            context = tf.distribute.InputContext(pipelines, index, 1)
            seen += digests(
                load_dataset(built, "train", service=service, input_context=context, **kwargs)
            )
        assert seen == expected


def test_an_address_where_no_dispatcher_answers_is_refused(built, service):
    worker = start_worker(service)  # a gRPC server of the service, but not its dispatcher
    try:
        with pytest.raises(ConnectionError, match="it is not a dispatcher"):
            load_dataset(built, "train", batch_size=8, service=f"grpc://{worker._address}")
    finally:
        worker._stop()
    web = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ConnectionError, match="does not speak gRPC"):
            checked_service(f"127.0.0.1:{web.server_port}", timeout=10)
    finally:
        web.shutdown()


@pytest.mark.slow
def test_a_dispatcher_on_a_port_in_use_is_refused(service):
    port = service.rsplit(":", 1)[1]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "loaders.service", "dispatcher", "--port", port]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert f"--port {port} is in use" in done.stderr


def test_the_command_line_recipe_serves_a_trainer(built, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "loaders.service"]
    logs = [tmp_path / "dispatcher.log", tmp_path / "worker.log"]
    servers = [
        subprocess.Popen(
            [*command, "dispatcher", "--port", str(port)], env=env, stderr=logs[0].open("w")
        )
    ]
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:  # until the dispatcher listens
            try:
                checked_service(address, timeout=1)
                break
            except ConnectionError:
                assert servers[0].poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        servers.append(
            subprocess.Popen(
                [*command, "worker", "--dispatcher", address, "--worker_address", "127.0.0.1"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=logs[1].open("w"),
                text=True,
            )
        )
        line = servers[1].stdout.readline().strip()  # once it runs
        assert re.fullmatch(
            rf"tf\.data service worker for {re.escape(address)}, reached by trainers at "
            r"127\.0\.0\.1:\d+",
            line,
        ), line
        dataset = load_dataset(
            built,
            "validation",
            batch_size=5,
            image_size=SIZE,
            label_mode="int",
            service=f"grpc://{address}",
        )
        labels = np.concatenate([y.numpy() for _, y in dataset])
        local = np.concatenate(
            [
                y.numpy()
                for _, y in load_dataset(
                    built, "validation", batch_size=5, image_size=SIZE, label_mode="int"
                )
            ]
        )
        assert sorted(labels) == sorted(local) and len(labels) == 25
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)
    for log in logs:  # runpy warns when `import loaders` has imported loaders.service already
        assert "RuntimeWarning" not in log.read_text(), log


def test_a_worker_registers_an_address_trainers_on_other_hosts_can_reach(monkeypatch):
    # TensorFlow's default, localhost:%port%, was handed to trainers on other hosts, which
    # reached themselves.
    assert worker_address("localhost:5050") == "localhost:%port%"
    assert worker_address("grpc://127.0.0.1:5050") == "localhost:%port%"
    assert worker_address("10.0.0.7:5050") == f"{host_name()}:%port%"
    assert worker_address("10.0.0.7:5050", "cpu-3.lab") == "cpu-3.lab:%port%"
    assert worker_address("10.0.0.7:5050", "cpu-3.lab:6000") == "cpu-3.lab:6000"
    assert worker_address("10.0.0.7:5050", "fe80::1") == "[fe80::1]:%port%"
    assert worker_address("10.0.0.7:5050", "[fe80::1]:6000") == "[fe80::1]:6000"
    # Many containers' /etc/hosts give `localhost` first for the host's own name.
    monkeypatch.setattr(socket, "getfqdn", lambda: "localhost")
    monkeypatch.setattr(socket, "gethostname", lambda: "cpu-3")
    assert worker_address("10.0.0.7:5050") == "cpu-3:%port%"


@pytest.mark.slow
def test_a_worker_without_its_dispatcher_says_so_in_a_line():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once the probe closes
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, "-m", "loaders.service", "worker", "--dispatcher"]
    done = subprocess.run(
        [*command, f"127.0.0.1:{port}"], env=env, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr.splitlines()[-1].split(": nothing answers")[0]) == (
        1,
        f"error: --dispatcher 127.0.0.1:{port}: no tf.data service dispatcher at 127.0.0.1:{port}",
    )
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        [*command, "localhost"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        "error: --dispatcher must be HOST:PORT, not 'localhost'"
    )
