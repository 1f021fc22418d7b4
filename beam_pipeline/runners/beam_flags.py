"""The command line split between this project and Beam: which flags are Beam's, the runner a
--runner name means (Dask's names: this project's DaskRunner), and the refusals of flags no
one would read or that are given twice."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib.util
import io
import logging
from collections.abc import Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import create_runner

from beam_pipeline.arguments import refuse_repeated
from beam_pipeline.options import BuildOptions


def known_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


# `--runner DaskRunner` (any case, or Beam's own class path) runs on this project's DaskRunner:
# Beam's, with a translation that computes each stage once (`beam_pipeline.runners.dask_runner`).
DASK_RUNNER = "beam_pipeline.runners.dask_runner.DaskRunner"


_DASK_NAMES = {"dask", "daskrunner", "apache_beam.runners.dask.dask_runner.daskrunner"}


def resolve_runner(name: str) -> str:
    """The runner `--runner NAME` means: DASK_RUNNER for Dask's names, else NAME as given.

    Raises:
      ValueError: Dask's runner is named but `dask.distributed` is not installed.
    """
    if name.lower() not in _DASK_NAMES and name != DASK_RUNNER:
        return name
    if importlib.util.find_spec("distributed") is None:
        raise ValueError(
            f"--runner {name} needs Dask's distributed scheduler, which is not installed: "
            "pip install 'imagenet-tfrecords[dask]'"
        )
    return DASK_RUNNER


def _resolve_runner_flag(argv: Sequence[str]) -> list[str]:
    """`argv` with the value of --runner (either spelling) replaced by `resolve_runner`'s."""
    argv = list(argv)
    for position, token in enumerate(argv):
        if token.startswith("--runner="):
            argv[position] = "--runner=" + resolve_runner(token.split("=", 1)[1])
        elif token == "--runner" and position + 1 < len(argv):
            argv[position + 1] = resolve_runner(argv[position + 1])
    return argv


def _beam_parser(beam_argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser Beam itself builds from every registered PipelineOptions class."""
    options = PipelineOptions(beam_argv)
    # A bad value makes Beam's parse print usage and exit: the caller's parse names it instead.
    quiet = contextlib.redirect_stderr(io.StringIO())
    try:
        with quiet:
            runner = options.view_as(StandardOptions).runner
    except SystemExit:
        runner = None
    if runner:
        # A runner's own options (e.g. Dask's) register when its module is imported.
        with contextlib.suppress(Exception):
            create_runner(runner)
    captured: list[argparse.ArgumentParser] = []
    beam_logger = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_logger.level
    beam_logger.setLevel(logging.ERROR)  # its "Discarding unparseable args": ours says more
    try:
        with quiet:
            options.get_all_options(add_extra_args_fn=captured.append)
    except SystemExit:
        pass
    finally:
        beam_logger.setLevel(level)
    return captured[0]


def beam_argv(argv: Sequence[str], *, command_flags: Sequence[str] = ()) -> list[str]:
    """The part of a command line that is Beam's: every flag but the project's, in order.

    `--runner DaskRunner` (and Beam's class path for it) becomes `DASK_RUNNER`.
    `command_flags` are a subcommand's own flags (already parsed), offered as suggestions too.

    Raises:
      ValueError: for a flag or value that neither the project nor Beam knows, naming the
        closest known flag; for a value of the wrong type or a flag without its value (argparse
        would exit, and the build's console sends its message to the log alone); for a project
        flag given twice with different values (the last would win silently); for a Dask
        option without the Dask runner.
    """
    project = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    BuildOptions._add_argparse_args(project)
    refuse_repeated(argv, project)
    rest = _parse_known(project, list(argv))
    rest = _resolve_runner_flag(rest)
    dask_flags = sorted({t.split("=", 1)[0] for t in rest if t.startswith("--dask_")})
    if dask_flags and PipelineOptions(rest).view_as(StandardOptions).runner != DASK_RUNNER:
        raise ValueError(
            f"{', '.join(dask_flags)} is an option of the Dask runner: add --runner DaskRunner"
        )
    beam = _beam_parser(rest)
    beam.exit_on_error = False
    refuse_repeated(rest, beam)
    unknown = _parse_known(beam, rest)
    if unknown:
        ours = [*command_flags, *known_flags(project)]
        raise ValueError(_unknown_message(unknown, [*ours, *known_flags(beam)], ours))
    return rest


def _parse_known(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The tokens `parser` does not know; ValueError (argparse's own words) for a bad value."""
    try:
        _, rest = parser.parse_known_args(argv)
    except argparse.ArgumentError as error:
        raise ValueError(str(error)) from None
    return rest


# Keras's `image_dataset_from_directory` and TFDS's arguments given as flags of a build, and what
# does their work here (docs/coming-from-keras-and-tfds.md).
FLAG_HABITS = {
    "--subset": "a build writes every split: hold one out with --validation_split 0.2, then "
    'load split="validation"',
    "--class_names": "--labels_file FILE (one class a line) chooses the classes and their order",
    "--batch_size": "batches are the loader's: load_dataset(OUT, split, batch_size=...)",
    "--label_mode": "labels are the loader's: load_dataset(OUT, split, label_mode=...)",
    "--shuffle": "a build always shuffles every split (--seed); load_dataset(training=True) "
    "shuffles each epoch",
    "--color_mode": "images are stored as RGB",
}


def _unknown_message(unknown: Sequence[str], known: Sequence[str], ours: Sequence[str] = ()) -> str:
    flags = [token for token in unknown if token.startswith("-")]
    if not flags:
        return (
            f"unexpected argument {unknown[0]!r}: every value follows its flag "
            "(e.g. --input_dir TREE --output_dir OUT)"
        )
    problems = []
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in FLAG_HABITS:  # (Keras's or TFDS's word)
            problems.append(f"{name} (Keras's or TFDS's: {FLAG_HABITS[name]})")
            continue
        # A flag cut short names the project's one it starts (`--out`: --output_dir, not
        # --layout), where one does.
        close = [k for k in ours if k.startswith(name)] if len(name) > 3 else []
        if len(close) != 1:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        problems.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return (
        f"unknown flag {', '.join(problems)}; `python -m beam_pipeline build --help` lists the "
        "project's flags, and every Apache Beam pipeline option is accepted"
    )
