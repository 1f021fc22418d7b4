"""The Apache Beam versions this project is tested on, and the check a build makes of its own.

`setup.py` admits `apache-beam>=2.71,<3`. 2.71 is the oldest that installs beside the pinned
numpy and runs every path (FnApiRunner by its short name needs 2.66; the Dask runner's options
`current_only`, 2.71); the suite ran on 2.71.0 and runs on 2.77.0 (`requirements.txt`) in CI.
Older is refused before anything is written; newer is built with a warning that names the
tested range (the Dask runner uses Beam's private names, `dask_translation.py`).
"""

from __future__ import annotations

import logging
import re

import apache_beam

OLDEST = (2, 71)
NEWEST_TESTED = (2, 77)
logger = logging.getLogger(__name__)


def _parsed(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as `2.77.0` or `2.78.0.dev0`."""
    major, minor = [*version.split("."), "0"][:2]
    digits = re.match(r"\d+", minor)  # "71rc1": 71
    return int(major), int(digits.group()) if digits else 0


def check_beam_version(version: str | None = None) -> None:
    """Raises ValueError for a Beam older than `OLDEST`; warns for one newer than tested.
    `version`: the installed Beam's by default."""
    version = version or apache_beam.__version__
    found = _parsed(version)
    tested = f"{OLDEST[0]}.{OLDEST[1]} to {NEWEST_TESTED[0]}.{NEWEST_TESTED[1]}"
    if found < OLDEST:
        raise ValueError(
            f"Apache Beam {version} is older than this project runs on (tested: {tested}); "
            f"pip install 'apache-beam>={OLDEST[0]}.{OLDEST[1]},<3'"
        )
    if found > NEWEST_TESTED:
        logger.warning(
            "Apache Beam %s is newer than the versions this project is tested on (%s); if a "
            "build fails, pip install apache-beam==%d.%d.0",
            version,
            tested,
            *NEWEST_TESTED,
        )
