"""What a runner whose workers are elsewhere needs before a build starts: Beam file systems for
the URLs given, absolute local paths, and a Dataflow job its workers can run."""

from __future__ import annotations

import dataclasses
import os

from apache_beam.io.filesystems import BeamIOError, FileSystems
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)

from beam_pipeline.options import BuildConfig
from schemas.paths import file_system_error, is_local

_INSTALL_HINTS = {
    "gs": "pip install 'imagenet-tfrecords[dataflow]' (Beam's gcp extra)",
    "s3": "pip install 'apache-beam[aws]'",
    "az": "pip install 'apache-beam[azure]'",
    "hdfs": "pip install 'apache-beam[hadoop]'",
}


def check_file_systems(config: BuildConfig) -> None:
    """ValueError, naming the flag, for a URL whose scheme no installed Beam file system reads
    (`gs://` without `apache-beam[gcp]`)."""
    for flag, path in _path_flags(config):
        if is_local(path):
            continue
        scheme = path.split("://", 1)[0]
        try:
            FileSystems.get_filesystem(path)
        except (ValueError, BeamIOError):
            hint = f": {_INSTALL_HINTS[scheme]}" if scheme in _INSTALL_HINTS else ""
            if scheme == "file":
                hint = f": name the local path without file:// ({path[len('file://') :]})"
            raise ValueError(
                f"{flag} {path}: no Apache Beam file system for {scheme}:// is installed{hint}"
            ) from None
        try:  # (s3:// and hdfs:// file systems are there, but not set up to reach anything)
            FileSystems.exists(path)
        except BeamIOError as error:
            raise ValueError(
                f"{flag} {path}: Beam's {scheme}:// file system cannot reach it: "
                f"{file_system_error(error)}"
            ) from None


def _path_flags(config: BuildConfig) -> list[tuple[str, str]]:
    flags = [
        ("--input_dir", config.input_dir),
        ("--output_dir", config.output_dir),
        ("--labels_file", config.labels_file),
    ]
    return [(flag, path) for flag, path in flags if path]


def with_absolute_paths(config: BuildConfig) -> BuildConfig:
    """The config with local paths made absolute: a cluster's workers run in directories of
    their own, where a relative path names another tree (or none)."""
    return dataclasses.replace(
        config,
        input_dir=absolute_path(config.input_dir),
        output_dir=absolute_path(config.output_dir) if config.output_dir else config.output_dir,
        labels_file=absolute_path(config.labels_file) if config.labels_file else None,
    )


_DATAFLOW = ("dataflowrunner", "dataflow", "testdataflowrunner")


def _refuse_job_flags(options: PipelineOptions, config: BuildConfig) -> None:
    """ValueError for a Dataflow job's flags on a command line that names no runner: a cloud
    build was meant, and the whole tree would be built on this machine instead. (Not where the
    tree or the output is on gs://, whose client reads --project.)"""
    cloud, worker = options.view_as(GoogleCloudOptions), options.view_as(WorkerOptions)
    given = [
        flag
        for flag, value in (
            ("--project", cloud.project),
            ("--region", cloud.region),
            ("--job_name", cloud.job_name),
            ("--staging_location", cloud.staging_location),
            ("--machine_type", worker.machine_type),
        )
        if value
    ]
    if given and not any(path.startswith("gs://") for _, path in _path_flags(config)):
        raise ValueError(
            f"{', '.join(given)} {'names' if len(given) == 1 else 'name'} a Dataflow job, and "
            "this command line names no runner: add --runner DataflowRunner to build on "
            "Dataflow, or leave them out to build on this machine"
        )


def check_dataflow(options: PipelineOptions, config: BuildConfig) -> None:
    """ValueError for a Dataflow build its workers could not run: local paths (they read
    Cloud Storage, not this machine's disk), no way to install this package on them, a
    `--setup_file` that is not there, or options Beam's own validation refuses (a missing
    `--project`): all found before the tree is read, which on an unreachable Cloud Storage
    takes minutes of retries."""
    runner = options.view_as(StandardOptions).runner or ""
    if not runner:
        _refuse_job_flags(options, config)
    if runner.lower().rsplit(".", 1)[-1] not in _DATAFLOW:
        return
    local = [f"{flag} {path}" for flag, path in _path_flags(config) if is_local(path)]
    if local:
        raise ValueError(
            f"--runner {runner}: {', '.join(local)} {'is' if len(local) == 1 else 'are'} on "
            "this machine, which Dataflow's workers cannot reach; copy it to Cloud Storage and "
            "pass gs://BUCKET/... paths"
        )
    setup = options.view_as(SetupOptions)
    image = options.view_as(WorkerOptions).sdk_container_image
    if not (setup.setup_file or setup.extra_packages or image):
        raise ValueError(
            f"--runner {runner}: the workers need this package: pass --setup_file ./setup.py "
            "(a checkout's, or the unpacked sdist's), --extra_package the sdist, or "
            "--sdk_container_image an image that has it installed"
        )
    for flag, path in [("--setup_file", setup.setup_file)] + [
        ("--extra_package", package) for package in setup.extra_packages or ()
    ]:
        if path and is_local(path) and not os.path.isfile(path):
            what = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
            raise ValueError(f"--runner {runner}: {flag} {path} {what}")
        if flag == "--setup_file" and path and os.path.basename(path) != "setup.py":
            raise ValueError(
                f"--runner {runner}: --setup_file {path} is not a setup.py (Beam runs it to "
                "package this project for the workers): pass --setup_file ./setup.py"
            )
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    errors = PipelineOptionsValidator(options, DataflowRunner()).validate()
    if errors:
        raise ValueError(f"--runner {runner}: {' '.join(errors)}")


def absolute_path(path: str) -> str:
    """A local path made absolute (build_info.json records where the tree was); URLs as they are."""
    return os.path.abspath(path) if is_local(path) else path
