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
