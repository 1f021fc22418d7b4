"""Apache Beam builder: ImageNet-style image/annotation trees → sharded TFRecords."""

import logging

__version__ = "0.1.0"


class _DropBigQueryNotice(logging.Filter):
    """Beam's first import logs "apitools not found, and bigquery client libraries are not
    available" through the root logger; nothing here uses BigQuery, and `python -m
    beam_pipeline.verify` would print it above its report."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


logging.getLogger().addFilter(_DropBigQueryNotice())
