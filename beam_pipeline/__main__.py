"""Command line: `python -m beam_pipeline [COMMAND] ...` (`beam_pipeline.tools.commands`)."""

import sys

from beam_pipeline.tools.commands import cli

if __name__ == "__main__":
    sys.exit(cli())
