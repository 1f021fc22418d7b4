"""Rejected inputs as data: the dead-letter record and the error that produces it.

Every file the build does not turn into an example becomes one `Rejection` with a stable
`reason` code (counted in `build_info.json` and Beam metrics) and a human `detail`. Each
stage sends its rejections to a tagged output named `REJECTED`, through `count_rejection`.
"""

from __future__ import annotations

import dataclasses
import json

# The one namespace of the build's Beam metrics, and the tag of every stage's rejected output.
METRICS_NAMESPACE = "imagenet_tfrecords"
REJECTED = "rejected"

# Stages, in pipeline order.
DISCOVER = "discover"
ANNOTATION = "annotation"
LABEL = "label"
IMAGE = "image"


class InputError(Exception):
    """A problem with one input file; becomes a `Rejection`, never a crash."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True, order=True)
class Rejection:
    """One dead-letter line.

    Attributes:
      split: the output split the file belonged to, or "" when it belongs to none.
      path: the rejected file.
      stage: where it was rejected (discover, annotation, label, image).
      reason: a stable machine-readable code, e.g. `truncated_image`.
      detail: what exactly was wrong, for a person.
      is_image: True when the file was a discovered image (counts against the error budget and
        in `num_rejected`); False for other files (an annotation without an image, a stray file).
      image: when `path` is an image's XML, the image it costs (so every image of the tree is
        either written or named in `rejected.jsonl`); "" otherwise, and then left out of the
        line.
    """

    split: str
    path: str
    stage: str
    reason: str
    detail: str
    is_image: bool = True
    image: str = ""

    def as_dict(self) -> dict[str, str | bool]:
        """The fields of a `rejected.jsonl` line (`image` only when set)."""
        fields = dataclasses.asdict(self)
        if not self.image:
            del fields["image"]
        return fields

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_error(
        cls, error: InputError, *, split: str, path: str, stage: str, image: str = ""
    ) -> Rejection:
        return cls(split, path, stage, error.reason, error.detail, image=image)


def read_dead_letter(text: str) -> list[dict]:
    """The lines of a build's `rejected.jsonl` (its text), each checked to hold `split`,
    `reason` and `is_image`, as `Rejection.as_dict` writes them.

    Raises:
      ValueError: a line is not one a build writes (its number and what is wrong).
    """
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
            if not isinstance(fields, dict) or not {"split", "reason", "is_image"} <= set(fields):
                raise ValueError("split, reason or is_image is missing")
        except ValueError as error:
            raise ValueError(f"line {number} is not a build's rejection: {error}") from None
        lines.append(fields)
    return lines
