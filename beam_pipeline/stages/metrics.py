"""A stage's rejections counted in Beam's metrics (`rejected_<reason>`) as they leave it."""

from __future__ import annotations

from apache_beam.metrics import Metrics

from beam_pipeline.core.rejections import METRICS_NAMESPACE, Rejection


def count_rejection(rejection: Rejection) -> Rejection:
    """Counts a rejection in the Beam metric `rejected_<reason>`; returns it."""
    Metrics.counter(METRICS_NAMESPACE, f"rejected_{rejection.reason}").inc()
    return rejection
