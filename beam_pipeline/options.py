"""Command-line options of a build, and the validated frozen config made from them.

Project flags live in a `PipelineOptions` subclass. `beam_argv` picks Beam's part of a command
line: every Beam pipeline option (runner, project, region,
temp_location, setup_file, direct_num_workers, ...) passes through to Beam unchanged, the
project's flags never reach Beam, and a flag that neither knows (a typo) is refused with the
closest known flag, before any work.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.console.build_console import add_console_flags
from beam_pipeline.core.holdout import TEST, VALIDATION, HoldOut
from beam_pipeline.core.images import EXACT, ORIGINAL, RESIZE_MODES, SHORTER_SIDE, ImagePolicy
from beam_pipeline.core.quality.duplicates import DROP_LEAKS, FAIL, OFF, POLICIES
from beam_pipeline.core.sharding import DEFAULT_TARGET_SHARD_BYTES
from beam_pipeline.tree.layouts import (
    AUTO,
    LAYOUTS,
    output_split,
    refuse_unloadable_split,
    vocabulary_split,
)


class BuildOptions(PipelineOptions):
    """The project's own flags."""

    @classmethod
    def _add_argparse_args(cls, parser):
        _add_tree_flags(parser)
        _add_held_out_flags(parser)
        _add_image_flags(parser)


def _add_tree_flags(parser: argparse.ArgumentParser) -> None:
    """What to read, how to split and shard it."""
    parser.add_argument(
        "--input_dir",
        help="Root of the tree (local or gs://): ILSVRC DET or CLS-LOC, Pascal VOC, a folder of "
        "class folders, or images with their VOC XML (Roboflow's, Kaggle's exports); locally "
        "also the download folder one level above it (X/VOCdevkit/..., Kaggle's X/ILSVRC/...).",
    )
    parser.add_argument("--output_dir", help="Where shards and metadata are written.")
    parser.add_argument(
        "--layout",
        default=AUTO,
        choices=(AUTO, *LAYOUTS),
        help="Tree layout (default: detect).",
    )
    parser.add_argument(
        "--splits",
        default=None,
        help="Comma-separated input splits, as named in the tree (default: train,val; a "
        "class-folder tree's split folders, or its root as train).",
    )
    parser.add_argument(
        "--labels_file",
        default=None,
        help="Class list, one per line (first token); default: sorted names seen in train "
        "(or VOC's trainval).",
    )
    parser.add_argument(
        "--num_shards",
        default=None,
        help=(
            "Shards per split: N for every split, or train=N,val=M (default: at most "
            "--target_shard_mb each, a power of two up to 16 or a multiple of 16)."
        ),
    )
    parser.add_argument(
        "--target_shard_mb",
        type=float,
        default=DEFAULT_TARGET_SHARD_BYTES / 2**20,
        help="The largest shard the default shard count allows, in MiB of input images "
        f"(default {DEFAULT_TARGET_SHARD_BYTES // 2**20}).",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="Seed of the global shuffle (default 0)."
    )


def _add_held_out_flags(parser: argparse.ArgumentParser) -> None:
    """Splits the build makes of a tree's train split (`core.holdout`)."""
    parser.add_argument(
        "--validation_split",
        type=float,
        default=0.0,
        help="Hold out this fraction of each class's train images as the validation split "
        "(a tree with only training images; seeded by --split_seed).",
    )
    parser.add_argument(
        "--test_split",
        type=float,
        default=0.0,
        help="Hold out this fraction of each class's train images as the test split.",
    )
    parser.add_argument(
        "--split_seed",
        type=int,
        default=0,
        help="Seed of the held-out splits (default 0; apart from --seed, so a reshuffle "
        "keeps them).",
    )


def _add_image_flags(parser: argparse.ArgumentParser) -> None:
    """What a build does with each image, and with the output directory."""
    parser.add_argument(
        "--image_policy",
        default=ORIGINAL,
        choices=RESIZE_MODES,
        help="original: keep size (valid RGB JPEGs keep their bytes); shorter_side: scale "
        "the shorter side to --image_size; exact: scale to --image_size HxW.",
    )
    parser.add_argument(
        "--image_size",
        default=None,
        help="Required with a resize policy: N (e.g. 256) for shorter_side, HxW (e.g. "
        "224x224) for exact.",
    )
    parser.add_argument(
        "--jpeg_quality", type=int, default=95, help="Quality of re-encoded JPEGs (default 95)."
    )
    parser.add_argument(
        "--max_pixels", type=int, default=None, help="Refuse larger images (default ~89 Mpx)."
    )
    parser.add_argument(
        "--keep_stray_jpeg_bytes",
        action="store_true",
        default=False,
        help="Keep JPEGs whose data goes on after their scan ended ('N extraneous bytes "
        "before marker'; usually damage, the picture garbled), without those bytes, each "
        "listed in rejected.jsonl as reported (default: rejected, stray_jpeg_bytes).",
    )
    parser.add_argument(
        "--duplicates",
        default=OFF,
        choices=POLICIES,
        help="report: find copies among the images (duplicates.jsonl; leaks between splits "
        "warned of); drop_leaks: leave the copies of training images out of the other splits "
        "(rejected.jsonl); fail: stop on such a copy; off (default).",
    )
    parser.add_argument(
        "--max_bad_fraction",
        type=float,
        default=0.01,
        help="Fail the build when more than this fraction of images is rejected (default 0.01).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        default=False,
        help="Replace an existing complete build in --output_dir; it stays whole and "
        "readable until the new build commits.",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        default=False,
        help="After a crash, keep the shards that are complete and intact; write the rest "
        "(with --overwrite: those an interrupted rebuild wrote).",
    )
    add_console_flags(parser)


def _home(path: str | None) -> str | None:
    """`~/x` or `~user/x` expanded: a shell leaves the tilde of `--output_dir=~/x` as it is,
    and a build wrote into a folder named `~` in the current directory."""
    return os.path.expanduser(path) if path and path.startswith("~") else path


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """Everything a build needs, validated once."""

    input_dir: str
    output_dir: str
    layout: str = AUTO
    splits: tuple[str, ...] = ()  # () until `pipeline.prepare`: the layout's default
    labels_file: str | None = None
    num_shards: dict[str, int] | int | None = None
    target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES
    seed: int = 0
    image_policy: ImagePolicy = dataclasses.field(default_factory=ImagePolicy)
    max_bad_fraction: float = 0.01
    overwrite: bool = False
    resume: bool = False
    validation_split: float = 0.0
    test_split: float = 0.0
    split_seed: int = 0
    duplicates: str = OFF

    @property
    def holds_out(self) -> bool:
        """Whether the build holds splits out of train (--validation_split, --test_split)."""
        return bool(self.validation_split or self.test_split)

    def __post_init__(self):
        if not self.input_dir:
            raise ValueError("--input_dir is required")
        if self.duplicates not in POLICIES:
            raise ValueError(f"--duplicates must be one of {POLICIES}, not {self.duplicates!r}")
        if self.image_policy.fingerprints != (self.duplicates != OFF):
            raise ValueError(
                f"--duplicates {self.duplicates} needs ImagePolicy(fingerprints="
                f"{self.duplicates != OFF})"
            )
        if self.layout not in (AUTO, *LAYOUTS):
            raise ValueError(f"--layout must be one of {(AUTO, *LAYOUTS)}")
        if len(set(self.splits)) != len(self.splits):
            raise ValueError(f"--splits must name distinct splits, got {self.splits}")
        for split in self.splits:
            refuse_unloadable_split(split)
        self._check_splits()
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ValueError("--max_bad_fraction must be in [0, 1]")
        if self.target_shard_bytes <= 0:
            raise ValueError(
                f"--target_shard_mb must be positive, not {self.target_shard_bytes} bytes"
            )
        shards = self.num_shards
        if isinstance(shards, dict):
            for split, count in shards.items():
                if count < 1:
                    raise ValueError(
                        f"--num_shards {split}={count}: each split needs at least 1 shard "
                        "(leave a split out of --splits to skip it)"
                    )
        elif shards is not None and shards < 1:
            raise ValueError(f"--num_shards must be at least 1, not {shards}")
        if isinstance(shards, dict) and self.splits:
            held_out = [
                name
                for name, fraction in ((VALIDATION, self.validation_split), (TEST, self.test_split))
                if fraction
            ]
            built = [output_split(s) for s in self.splits] + held_out
            unknown = sorted(set(shards) - set(built))
            if unknown:
                raise ValueError(
                    f"--num_shards names {unknown}, which this build does not write; its splits "
                    f"are {built} (--splits {','.join(self.splits)}; val is written as validation)"
                )

    def _check_splits(self) -> None:
        """The held-out fractions and seed, and a training split where --duplicates needs one."""
        for name, fraction in (("validation", self.validation_split), ("test", self.test_split)):
            if not 0.0 <= fraction < 1.0:  # (NaN too)
                raise ValueError(
                    f"--{name}_split must be a fraction in [0, 1), e.g. 0.2, not {fraction}"
                )
        training = vocabulary_split([split.lower() for split in self.splits])
        if self.duplicates in (DROP_LEAKS, FAIL) and self.splits and training is None:
            raise ValueError(
                f"--duplicates {self.duplicates} acts on held-out copies of training images; "
                f"the splits this build writes ({', '.join(self.splits)}) hold no training "
                "split (train, or VOC's trainval): --duplicates report finds the copies among them"
            )
        if self.split_seed and not (self.validation_split or self.test_split):
            raise ValueError(
                f"--split_seed {self.split_seed} seeds the splits --validation_split and "
                "--test_split hold out; this build holds none out: drop it, or add one"
            )
        if self.validation_split + self.test_split >= 1.0:
            raise ValueError(
                f"--validation_split {self.validation_split} and --test_split "
                f"{self.test_split} would hold out every training image: their sum must be "
                "below 1"
            )

    @classmethod
    def from_options(cls, options: PipelineOptions, *, need_output: bool = True) -> BuildConfig:
        """Reads and validates the project flags; raises ValueError with the flag at fault.

        `need_output=False` (a plan) leaves `output_dir` empty when no --output_dir is given.
        """
        flags = options.view_as(BuildOptions)
        if need_output and not (flags.input_dir and flags.output_dir):
            raise ValueError("--input_dir and --output_dir are required")
        for flag, path in (("--input_dir", flags.input_dir), ("--output_dir", flags.output_dir)):
            if path is not None and not path.strip():  # (' ' built into a folder named ' ')
                raise ValueError(f"{flag} {path!r} is blank: name a folder")
        policy_kwargs: dict[str, Any] = {
            "mode": flags.image_policy,
            "size": parse_image_size(flags.image_policy, flags.image_size),
            "jpeg_quality": flags.jpeg_quality,
            "keep_stray_jpeg_bytes": flags.keep_stray_jpeg_bytes,
            "fingerprints": flags.duplicates != OFF,
        }
        if flags.max_pixels is not None:
            policy_kwargs["max_pixels"] = flags.max_pixels
        return cls(
            input_dir=_home(flags.input_dir) or "",
            output_dir=_home(flags.output_dir) or "",
            layout=flags.layout,
            splits=_splits(flags.splits),
            labels_file=_home(_given("--labels_file", flags.labels_file)),
            num_shards=parse_num_shards(flags.num_shards),
            target_shard_bytes=_shard_bytes(flags.target_shard_mb),
            seed=flags.seed,
            image_policy=ImagePolicy(**policy_kwargs),
            max_bad_fraction=flags.max_bad_fraction,
            overwrite=flags.overwrite,
            resume=flags.resume,
            validation_split=flags.validation_split,
            test_split=flags.test_split,
            split_seed=flags.split_seed,
            duplicates=flags.duplicates,
        )

    def held_out(self, source: str) -> HoldOut | None:
        """The held-out splits taken from the output split `source`, or None."""
        fractions = tuple(
            (name, fraction)
            for name, fraction in ((VALIDATION, self.validation_split), (TEST, self.test_split))
            if fraction > 0
        )
        return HoldOut(source, fractions, self.split_seed) if fractions else None

    def num_shards_for(self, split: str) -> int | None:
        """Requested shard count of an output split, or None for the size-based default."""
        if isinstance(self.num_shards, dict):
            return self.num_shards.get(split)
        return self.num_shards

    def to_metadata(self) -> dict[str, Any]:
        """The options as recorded in build_info.json."""
        policy = self.image_policy
        return (
            {
                "layout": self.layout,
                "splits": list(self.splits),
                "labels_file": self.labels_file,
                "num_shards": self.num_shards,
                "target_shard_bytes": self.target_shard_bytes,
                "seed": self.seed,
                "image_policy": {
                    "mode": policy.mode,
                    "size": list(policy.size),
                    "jpeg_quality": policy.jpeg_quality,
                    "max_pixels": policy.max_pixels,
                    "exif_orientation": "ignored (pixels kept as encoded)",
                    "stray_jpeg_bytes": (
                        "kept, reported" if policy.keep_stray_jpeg_bytes else "rejected"
                    ),
                },
                "max_bad_fraction": self.max_bad_fraction,
            }
            | self._held_out_metadata()
            | ({"duplicates": self.duplicates} if self.duplicates != OFF else {})
        )

    def _held_out_metadata(self) -> dict[str, Any]:
        """`held_out` in the metadata when splits are held out (none otherwise: the metadata
        of a build without them is as it was)."""
        if not (self.validation_split or self.test_split):
            return {}
        held_out = self.held_out(output_split(vocabulary_split(self.splits) or "train"))
        assert held_out is not None
        return {"held_out": held_out.to_metadata()}


def _given(flag: str, value: str | None) -> str | None:
    """A path flag's value; ValueError for an empty one, which was taken as not given."""
    if value is not None and not value.strip():
        raise ValueError(f"{flag} is empty: name the file, or leave the flag out")
    return value


def _splits(text: str | None) -> tuple[str, ...]:
    """`--splits train,val` → ("train", "val"); not given → () (the layout's default)."""
    if text is None:
        return ()
    splits = tuple(part.strip() for part in text.split(",") if part.strip())
    if not splits:
        raise ValueError(f"--splits names no split: {text!r}; e.g. --splits train,val")
    return splits


def parse_num_shards(text: str | None) -> dict[str, int] | int | None:
    """`16` → 16; `train=16,val=4` → {"train": 16, "validation": 4}; None → None."""
    if text is None:
        return None
    if not str(text).strip():  # (a shell variable left empty: it was taken as not given)
        raise ValueError("--num_shards is empty: give N or split=N,..., or leave the flag out")
    text = str(text).strip()
    malformed = ValueError(f"--num_shards must be N or split=N,...; got {text!r}")
    if "=" not in text:
        try:
            return int(text)
        except ValueError:
            raise malformed from None
    result = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if not name.strip():
            raise malformed
        split = output_split(name.strip())
        if split in result:
            raise ValueError(f"--num_shards names {name.strip()!r} twice: {text!r}")
        try:
            result[split] = int(value)
        except ValueError:
            raise malformed from None
    return result


def parse_image_size(mode: str, text: str | None) -> tuple[int, ...]:
    """`--image_size` for the given policy: () for original, (N,) or (H, W)."""
    if text is not None and not text.strip():
        raise ValueError("--image_size is empty: give N or HxW, or leave the flag out")
    if mode == ORIGINAL:
        if text:
            raise ValueError("--image_size needs --image_policy shorter_side or exact")
        return ()
    if not text:
        raise ValueError(f"--image_policy {mode} needs --image_size")
    try:
        parts = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--image_size must be N or HxW, got {text!r}") from None
    if (mode == SHORTER_SIDE and len(parts) != 1) or (mode == EXACT and len(parts) != 2):
        expected = "N" if mode == SHORTER_SIDE else "HxW"
        raise ValueError(f"--image_policy {mode} needs --image_size {expected}, got {text!r}")
    if any(part < 1 for part in parts):
        raise ValueError(f"--image_size {text}: sizes are pixels, at least 1")
    return parts


def _shard_bytes(megabytes: float) -> int:
    if not math.isfinite(megabytes) or megabytes <= 0:
        raise ValueError(f"--target_shard_mb must be a positive number, not {megabytes}")
    if megabytes * 2**20 < 1:
        raise ValueError(
            f"--target_shard_mb {megabytes:g} is less than one byte: it is in MiB (default "
            f"{DEFAULT_TARGET_SHARD_BYTES // 2**20})"
        )
    return int(megabytes * 2**20)
