"""The console excerpts of `plan`, `inspect` and `stats` in docs/tools.md (the README's, before
the docs site), run on the bundled sample exactly as `./run_local.sh` builds it: every line the
page shows must be what the command prints (they had drifted: a record key added in schema 1.2,
the sizes it grew)."""

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from helpers import build
from test_readers import readme_blocks

from beam_pipeline.tools import commands, sample_tree

REPO = pathlib.Path(__file__).resolve().parent.parent

# Seconds vary from run to run; everything else must not.
_SECONDS = re.compile(r"\(\d+(\.\d+)? s\)")


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory):
    """A working directory holding `sample_data/tree` and its build `sample_data/out`, as
    `./run_local.sh` makes them."""
    work = tmp_path_factory.mktemp("work")
    tree = work / "sample_data" / "tree"
    sample_tree.write_tree(str(tree))
    build(tree, work / "sample_data" / "out", "--num_shards", "train=4,val=2")
    return work


def excerpts(command: str) -> list[tuple[list[str], list[str]]]:
    """(argv, shown lines) of each text block of docs/tools.md that runs `python -m
    beam_pipeline <command>`; a line `...` stands for lines the page leaves out."""
    found = []
    for language, block in readme_blocks(page="docs/tools.md"):
        first, *shown = block.rstrip("\n").split("\n")
        prefix = f"$ python -m beam_pipeline {command} "
        if language == "text" and first.startswith(prefix):
            found.append((shlex.split(first)[5:], shown))
    assert found, f"no excerpt of {command} in docs/tools.md"
    return found


def assert_shows(printed: str, shown: list[str]) -> None:
    """Each run of shown lines between `...` lines is printed, in order, line for line."""
    lines = [_SECONDS.sub("(N s)", line) for line in printed.rstrip("\n").split("\n")]
    position = 0
    parts, part = [], []
    for line in [*shown, "..."]:
        if line.strip() == "...":
            parts.append(part)
            part = []
        else:
            part.append(_SECONDS.sub("(N s)", line))
    for number, part in enumerate(parts):
        if not part:
            continue
        if number == 0:
            assert lines[: len(part)] == part
            position = len(part)
            continue
        for start in range(position, len(lines) - len(part) + 1):
            if lines[start : start + len(part)] == part:
                position = start + len(part)
                break
        else:
            pytest.fail(f"docs/tools.md lines not printed in order: {part}\nprinted:\n{printed}")


@pytest.mark.parametrize("command", ["plan", "inspect", "stats"])
def test_the_readme_shows_what_the_command_prints(sample_dir, monkeypatch, capsys, command):
    monkeypatch.chdir(sample_dir)
    for argv, shown in excerpts(command):
        capsys.readouterr()
        assert commands.main([command, *argv]) == 0
        assert_shows(capsys.readouterr().out, shown)


def test_run_local_runs_its_own_checkout_from_any_directory(tmp_path):
    """`./run_local.sh COMMAND` from another directory runs the script's checkout, not the
    one its environment was installed from (VENV=... of another clone ran that clone's code)."""
    checkout = tmp_path / "clone"
    (checkout / "scripts").mkdir(parents=True)
    for script in ("run_local.sh", "scripts/ensure_venv.sh"):
        shutil.copy2(REPO / script, checkout / script)
    package = checkout / "beam_pipeline"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import sys\nprint(__file__, sys.argv[1:])\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(checkout / "run_local.sh"), "plan", "tree"],
        cwd=elsewhere,
        env={**env, "VENV_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{package / '__main__.py'} ['plan', 'tree']\n"
