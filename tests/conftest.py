import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, settings

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests import their helpers as a module and the project from the checkout; DirectRunner's
# multi-process workers are separate interpreters and find the project through PYTHONPATH.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(autouse=True)
def _logs_in_the_test_directory(tmp_path, monkeypatch):
    """A build's default log file lies under the temp directory: this test's, not the system's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))


# Hypothesis (tests/test_fuzz.py): a fixed, derandomized budget in every suite; a campaign
# with HYPOTHESIS_PROFILE=campaign. Cases found go to tests/data/fuzz_cases/.
settings.register_profile(
    "ci",
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "campaign",
    max_examples=20_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# Variants whose siblings stay in the fast loop (`./run_tests.sh -m "not slow"`, 3 to 6
# minutes on 2 cores, docs/development.md): they run with the whole suite only. Node ids as
# pytest prints them.
_SLOW_VARIANTS = {
    "tests/test_build.py::test_a_failed_rebuild_keeps_the_build_it_was_to_replace[images]",
    "tests/test_build.py::test_a_rebuild_stopped_in_its_commit_says_what_is_left[moving_shards]",
    "tests/test_build.py::test_a_rebuild_stopped_in_its_commit_says_what_is_left"
    "[writing_tfds_marker]",
    "tests/test_console.py::test_ctrl_c_during_a_build_is_an_interruption[multi_processing-2-130-]",
    "tests/test_console.py::test_ctrl_c_during_a_build_is_an_interruption"
    "[in_memory-15-143- by SIGTERM]",
    "tests/test_console.py::test_progress_is_drawn_on_a_terminal_with_several_workers",
    "tests/test_dali.py::test_a_rebuild_that_commits_in_the_middle_of_an_epoch_stops_it_by_name"
    "[another seed]",
    "tests/test_dask.py::test_a_cluster_without_workers_is_refused",
    "tests/test_dask.py::test_a_build_whose_workers_all_died_fails_loudly",
    "tests/test_faults.py::test_files_no_build_wrote_are_never_replaced_or_deleted[flags1]",
    "tests/test_faults.py::test_files_no_build_wrote_are_never_replaced_or_deleted[flags2]",
    "tests/test_faults.py::test_an_unfinished_build_of_a_version_without_the_mark_is_still_its_own"
    "[rejected.jsonl]",
    "tests/test_service.py::test_the_command_line_recipe_serves_a_trainer",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid in _SLOW_VARIANTS:
            item.add_marker(pytest.mark.slow)
