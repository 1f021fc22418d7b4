"""The command line's checks of its flags, shared by every command and the Beam flags' parsing:
a flag given twice with two values is refused (`refuse_repeated`, `parse_once`: the last one
would win unseen), and argparse types for names and counts (`nonblank`, `count`)."""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Sequence


def _repeats(action: argparse.Action) -> bool:
    """Whether an option is given once per value, and so meant to repeat: an append action
    (`--extra_package`), or Beam's comma-separated lists that add up (`--experiments`)."""
    return isinstance(action, argparse._AppendAction) or type(action).__name__ == (
        "_CommaSeparatedListAction"
    )


def refuse_repeated(argv: Sequence[str], parser: argparse.ArgumentParser) -> None:
    """ValueError for a flag of `parser` given twice with different values (the last one
    would win unseen, as when a wrapper script appends its own); the same twice is harmless."""
    takes_value = {
        flag: action.nargs != 0
        for action in parser._actions
        if not _repeats(action)
        for flag in action.option_strings
    }
    values: dict[str, set[str | None]] = collections.defaultdict(set)
    value: str | None
    for position, token in enumerate(argv):
        flag, equals, value = token.partition("=")
        if flag not in takes_value:
            continue
        if takes_value[flag] and not equals:
            value = argv[position + 1] if position + 1 < len(argv) else None
            if value is None or value.startswith("--"):
                continue  # no value: argparse says so (`--seed --seed` was "given twice")
        values[flag].add(value)
    repeated = sorted(flag for flag, seen in values.items() if len(seen) > 1)
    if repeated:
        given = "; ".join(
            f"{flag} {' and '.join(sorted(map(str, values[flag])))}" for flag in repeated
        )
        raise ValueError(
            f"{', '.join(repeated)} given twice with different values ({given}): give each "
            "once (the last one would win unseen)"
        )


def parse_once(parser: argparse.ArgumentParser, argv: Sequence[str] | None, known: bool = False):
    """`parser.parse_args(argv)` (`parse_known_args` where `known`), exiting 2 (argparse's
    way) for a flag given twice with different values, as the build refuses them (`show -o
    a.png -o b.png` wrote b.png alone)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        refuse_repeated(argv, parser)
    except ValueError as error:
        parser.error(str(error))
    return parser.parse_known_args(argv) if known else parser.parse_args(argv)


def nonblank(value: str) -> str:
    """An argparse `type` for a name that cannot be blank (`inspect --filename ''` searched
    every shard for it, exit 1)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("is blank: name it")
    return value


def count(value: str) -> int:
    """An argparse `type` for a count: an int of 0 or more."""
    number = int(value)  # (argparse names a ValueError's flag and value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{number}: give 0 or more")
    return number
