"""The Dataflow path without Dataflow: what `--setup_file ./setup.py` ships must install and run."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
from helpers import summary_rows

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT_FILES = [
    "setup.py",
    "pyproject.toml",
    "README.md",
    "MANIFEST.in",
    "requirements.txt",
    "LICENSE",
]
PACKAGES = ["beam_pipeline", "schemas", "loaders"]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """Builds the sdist from a copy of the project, as Dataflow's launcher does."""
    work = tmp_path_factory.mktemp("project")
    for name in PROJECT_FILES:
        shutil.copy(ROOT / name, work / name)
    for package in [*PACKAGES, "tests"]:  # the tests are there, as in a checkout
        shutil.copytree(
            ROOT / package, work / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", "dist"],
        cwd=work,
        check=True,
        capture_output=True,
    )
    (archive,) = (work / "dist").glob("*.tar.gz")
    return archive


def test_sdist_holds_every_module_and_declares_worker_dependencies(sdist):
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        requires_txt = next(n for n in names if n.endswith(".egg-info/requires.txt"))
        requires = tar.extractfile(requires_txt).read().decode()
    for package in PACKAGES:
        for source in (ROOT / package).glob("*.py"):
            assert any(n.endswith(f"/{package}/{source.name}") for n in names), source
    # Lines before the first [extra] section are what every install (a Dataflow worker) gets.
    base = requires.split("\n[", 1)[0].split()
    declared = {re.split(r"[<>=!~;\[]", line, maxsplit=1)[0] for line in base}
    assert {"apache-beam", "pillow", "lxml", "numpy", "google-crc32c", "protobuf"} <= declared
    # TensorFlow is only for the loader: the builder's workers do not install it.
    assert "tensorflow" not in declared
    assert "tensorflow" in requires.split("[loader]", 1)[1].split("\n[", 1)[0]
    # Dask only for builds on a Dask cluster.
    assert "dask" not in declared
    assert "dask[distributed]" in requires.split("[dask]", 1)[1].split("\n[", 1)[0]
    assert "apache-beam[gcp]" in requires.split("[dataflow]", 1)[1].split("\n[", 1)[0]
    # DALI's loader is a loader: TensorFlow comes with it.
    assert "tensorflow" in requires.split("[gpu]", 1)[1].split("\n[", 1)[0]
    # The licence travels; the tests do not (the workers install this).
    assert any(name.endswith("/LICENSE") for name in names)
    assert not any("/tests/" in name for name in names)


def test_installed_sdist_builds_a_tree_in_a_fresh_interpreter(sdist, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(sdist),
        ],
        check=True,
        capture_output=True,
    )
    tree, out = tmp_path / "tree", tmp_path / "out"
    script = (
        "import sys; from beam_pipeline import pipeline; "
        "from beam_pipeline.tools import build, sample_tree; "
        "assert pipeline.__file__.startswith(sys.argv[3]), pipeline.__file__; "
        "sample_tree.write_tree(sys.argv[1], 12, 4); "
        "sys.exit(build.main(['--input_dir', sys.argv[1], '--output_dir', sys.argv[2]]))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-c", script, str(tree), str(out), str(target)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [row.split()[:3] for row in summary_rows(result.stdout)]
    assert rows == [["train", "12", "1"], ["validation", "4", "1"]]
    assert (out / "build_info.json").exists()


def test_the_loader_without_tensorflow_names_the_extra_to_install():
    # A base install (the builder's dependencies) followed the summary's `from loaders import
    # load_dataset` into a bare "No module named 'tensorflow'".
    code = "import sys; sys.modules['tensorflow'] = None; import loaders"
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: the loader needs TensorFlow, which the builder does not install: "
        "pip install 'imagenet-tfrecords[loader]'"
    )
