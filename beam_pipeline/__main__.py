"""Command line: `python -m beam_pipeline [COMMAND] ...` (`beam_pipeline.tools.commands.run`)."""

import sys

from beam_pipeline.tools.commands import run

if __name__ == "__main__":
    sys.exit(run())
