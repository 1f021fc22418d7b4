"""The fuzz target of a build's metadata: any text in `build_info.json`, read by every reader.

A build directory is often someone else's (copied, downloaded, edited by hand): its metadata
is untrusted bytes like its images. Invariants (`check_metadata_invariants`), for a copy of a
sound build whose `build_info.json` holds the text:

- the commands' reader (`output.readback.read_build_info`) and the loader's
  (`loaders.info.dataset_info`), each `schemas.metadata.read_build_info` over its own file
  system, return the build's metadata or refuse it with the error their docstrings name
  (`DamagedBuildError` naming the file, `ValueError` for a later schema), the same way,
  never another exception;
- where they read it, `stats`, `verify`, `show` and `inspect` end with an exit code (0, 1 or
  2), never a traceback.

The seed is `fuzz_records.seed_build`. Hypothesis drives it in `tests/test_fuzz_metadata.py`;
`python -m benchmarks.fuzz_campaign metadata` under Atheris.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import shutil
from typing import Any

from beam_pipeline.output.readback import read_build_info
from beam_pipeline.tools import inspect_record, show, stats, verify
from schemas import BUILD_INFO_FILE, DamagedBuildError


def build_copy(seed: pathlib.Path, into: pathlib.Path, text: str | bytes) -> pathlib.Path:
    """A copy of the seed build (`into`, replaced) whose metadata file holds `text`."""
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(seed, into)
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    (into / BUILD_INFO_FILE).write_bytes(data)
    return into


def check_metadata_invariants(out: pathlib.Path, tools: bool = True) -> str:
    """Holds every reader of `out`'s metadata to the invariants above; what became of it
    ("damaged", "later schema", "read")."""
    from loaders.info import dataset_info

    outcomes = []
    for reader in (lambda: read_build_info(str(out)), lambda: dataset_info(out)):
        try:
            reader()
            outcomes.append("read")
        except DamagedBuildError as error:
            assert f"{out}/{BUILD_INFO_FILE} is damaged" in str(error), error
            outcomes.append("damaged")
        except ValueError as error:  # a later major schema, said so
            assert "update imagenet-tfrecords to read it" in str(error), error
            outcomes.append("later schema")
    assert outcomes[0] == outcomes[1], outcomes  # the commands and the loader agree
    if outcomes[0] == "read" and tools:
        _check_tools(out)
    return outcomes[0]


def _check_tools(out: pathlib.Path) -> None:
    """Each command on the build ends with an exit code and a line, never a traceback."""
    commands = (
        (stats.main, [str(out)]),
        (verify.main, [str(out), "--workers", "1", "--no_decode"]),
        (show.main, [str(out), "-n", "4", "-o", str(out.parent / "sheet.png")]),
        (inspect_record.main, [str(out), "--split", "train", "--index", "0"]),
    )
    for command, argv in commands:
        said = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
            code = command(argv)
        assert code in (0, 1, 2), (command, code)
        assert "Traceback" not in said.getvalue(), said.getvalue()


def mutated(payload: Any, path: list, change: str, value: Any) -> Any:
    """`payload` (parsed JSON) with the value at `path` (keys and indexes) deleted, replaced
    by `value`, or (a list) cut to its first half."""
    if not path:
        return value if change == "replace" else payload
    head, rest = path[0], path[1:]
    if isinstance(payload, dict) and head in payload:
        copy = dict(payload)
        if not rest and change == "delete":
            del copy[head]
        else:
            copy[head] = mutated(payload[head], rest, change, value)
        return copy
    if isinstance(payload, list) and isinstance(head, int) and head < len(payload):
        copy = list(payload)
        if not rest and change == "delete":
            del copy[head]
        elif not rest and change == "cut":
            copy = copy[: len(copy) // 2]
        else:
            copy[head] = mutated(payload[head], rest, change, value)
        return copy
    return payload


def paths(payload: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) into parsed JSON, the root's () first."""
    found = [prefix]
    if isinstance(payload, dict):
        for key, value in payload.items():
            found += paths(value, (*prefix, key))
    elif isinstance(payload, list):
        for index, value in enumerate(payload):
            found += paths(value, (*prefix, index))
    return found


def seed_payload(seed: pathlib.Path) -> dict:
    return json.loads((seed / BUILD_INFO_FILE).read_text())
