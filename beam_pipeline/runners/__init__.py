"""Where a build runs: the local runner, Dataflow checks, the Dask runner, Beam versions."""
