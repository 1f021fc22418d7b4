"""The Beam versions a build runs on: setup.py's range, what CI installs, the start-up check."""

import logging
import pathlib
import re

import apache_beam
import pytest
from helpers import jpeg_bytes, write

from beam_pipeline.runners import beam_version
from beam_pipeline.tools import build as build_tool

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_setup_py_admits_from_the_oldest_version_and_ci_runs_the_newest_tested():
    setup = (ROOT / "setup.py").read_text()
    low = "{}.{}".format(*beam_version.OLDEST)
    assert f'"apache-beam>={low},<3"' in setup and f'"apache-beam[gcp]>={low},<3"' in setup
    pinned = re.search(
        r"^apache-beam==(\d+)\.(\d+)\.", (ROOT / "requirements.txt").read_text(), re.M
    )
    assert (int(pinned.group(1)), int(pinned.group(2))) == beam_version.NEWEST_TESTED
    installed = beam_version._parsed(apache_beam.__version__)
    assert beam_version.OLDEST <= installed <= beam_version.NEWEST_TESTED


def test_an_older_beam_is_refused_naming_the_tested_range_and_the_fix(
    tmp_path, monkeypatch, capsys
):
    # setup.py admitted 2.60 while every build failed on it (FnApiRunner's short name is 2.66's,
    # the Dask runner's options 2.71's): such a Beam is refused before anything is written.
    with pytest.raises(ValueError) as refused:
        beam_version.check_beam_version("2.70.1")
    assert str(refused.value) == (
        "Apache Beam 2.70.1 is older than this project runs on (tested: 2.71 to 2.77); "
        "pip install 'apache-beam>=2.71,<3'"
    )
    write(tmp_path / "tree/Data/CLS-LOC/train/n01/a.JPEG", jpeg_bytes())
    monkeypatch.setattr(apache_beam, "__version__", "2.60.0")
    out = tmp_path / "out"
    assert build_tool.main(["--input_dir", str(tmp_path / "tree"), "--output_dir", str(out)]) == 2
    assert "error: Apache Beam 2.60.0 is older than this project runs on" in capsys.readouterr().err
    assert not out.exists()


def test_the_tested_versions_pass_and_a_newer_one_is_named_in_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger=beam_version.__name__):
        beam_version.check_beam_version("2.71.0")
        beam_version.check_beam_version("2.77.0")
        assert caplog.messages == []
        beam_version.check_beam_version("2.80.0")
    assert caplog.messages == [
        "Apache Beam 2.80.0 is newer than the versions this project is tested on (2.71 to "
        "2.77); if a build fails, pip install apache-beam==2.77.0"
    ]
