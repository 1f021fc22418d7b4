"""Apache Beam builder: ImageNet-style image/annotation trees → sharded TFRecords.

Layers, lowest first (docs/architecture.md): `core/` the pure rules, `tree/` reading the input
tree, `output/` the output directory, `console/` what a person sees, `stages/` the Beam
transforms, `options` the flags, `runners/` where a build runs, `pipeline` the graph, `tools/`
the command line (`python -m beam_pipeline COMMAND`).
"""

import logging

__version__ = "0.1.0"


# Notices Beam's first import logs through the root logger, which `python -m
# beam_pipeline.tools.verify` would print above its report: nothing here uses BigQuery, and the
# builder writes TFRecords with google-crc32c (a dependency), not Beam's crcmod path (Beam 2.71
# logs the crcmod notice whatever is installed).
_BEAM_IMPORT_NOTICES = ("apitools not found", "crcmod package not found")


class _DropBeamImportNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_BEAM_IMPORT_NOTICES)


logging.getLogger().addFilter(_DropBeamImportNotices())
