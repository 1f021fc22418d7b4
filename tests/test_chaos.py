"""A short seeded chaos campaign (`benchmarks/chaos.py`): a real Dask cluster on loopback whose
workers and scheduler are killed while builds run, and local multi-process builds whose worker
processes are killed. Each build is byte-identical to the reference, or fails loudly with
nothing committed and `--resume` then gives the reference's bytes; none hangs."""

import re

import pytest

from benchmarks import chaos


@pytest.mark.slow
def test_builds_under_chaos_are_identical_or_fail_loudly_and_resume_identical(tmp_path, capsys):
    argv = ["--runs", "3", "--images", "300", "--seed", "7", "--timeout", "180"]
    code = chaos.main([*argv, "--scratch", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    runs = re.findall(r"^(dask|local) run \d: at [\d.]+ s, (.*): (.*)$", printed, re.MULTILINE)
    assert len(runs) == 6, printed
    verdicts = {verdict.split(" (exit")[0] for _, _, verdict in runs}
    assert verdicts <= {"identical", "failed loudly"}, printed
    done = [what for _, what, _ in runs]
    assert "scheduler SIGKILLed" in done, printed  # once in the Dask runs; it fails the build
    (scheduler_verdict,) = [v for _, what, v in runs if what == "scheduler SIGKILLed"]
    assert scheduler_verdict.endswith("resumed identical"), printed
    assert any(what.startswith("worker process") for mode, what, _ in runs if mode == "local")
    assert re.search(r"^  +\d+  local: failed loudly$", printed, re.MULTILINE), printed
