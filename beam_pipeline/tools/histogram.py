"""The class histogram of `show --histogram`: one bar chart of `class_counts` per split.

Drawn with matplotlib (the `show` extra, imported only when a figure is made) on an Agg canvas,
without pyplot's state; each bar in its class's colour on the contact sheet (`class_colour`),
named as the sheet names it (`n01440764 tench` where the build knows the display name).
Builds of many classes show their `TOP` most and `TOP` least frequent.
"""

from __future__ import annotations

from collections.abc import Sequence

from beam_pipeline.tools.build_records import class_title
from beam_pipeline.tools.sheet import class_colour
from schemas import DatasetInfo

TOP = 30  # builds with more than 2 * TOP classes (background included) show the extremes


def histogram_bars(info: DatasetInfo, split: str, top: int = TOP) -> tuple[list[str], list[int]]:
    """(names, counts) of one split's bars: every class in class order (background last, where
    the build has background images), or, with more than `2 * top`, the `top` most then the
    `top` least frequent by count."""
    names = [class_title(info.display_names, name) for name in info.class_list.names]
    counts = list(info.splits[split].class_counts)
    if not info.has_background:
        names, counts = names[: info.num_classes], counts[: info.num_classes]
    if len(names) <= 2 * top:
        return names, counts
    order = sorted(range(len(names)), key=lambda i: (-counts[i], names[i]))
    kept = order[:top] + order[-top:]
    return [names[i] for i in kept], [counts[i] for i in kept]


def class_histogram(info: DatasetInfo, splits: Sequence[str] | None = None, top: int = TOP):
    """A matplotlib Figure (Agg canvas, no pyplot state): one bar chart per split.

    Raises ImportError without matplotlib.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    splits = list(splits or sorted(info.splits))
    names = [class_title(info.display_names, name) for name in info.class_list.names]
    bars = min(len(names), 2 * top)
    longest = min(max(len(name) for name in names), 40)
    width = max(6.4, 1.6 + 0.28 * bars)
    flat = longest * 0.075 <= 0.85 * (width - 1.6) / bars  # names fit under their bars
    height_each = 2.6 + (0.2 if flat else 0.075 * longest)
    # An unlabelled split has no counts to plot: a strip that says so.
    ratios = [1.0 if info.splits[split].labelled else 0.3 for split in splits]
    figure = Figure(figsize=(width, height_each * sum(ratios)), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(splits), 1, squeeze=False, gridspec_kw={"height_ratios": ratios})[
        :, 0
    ]
    for ax, split in zip(axes, splits, strict=True):
        split_info = info.splits[split]
        title = f"{split}: {split_info.num_examples:,} examples"
        if split_info.labelled:
            _bar_chart(ax, info, split, title, top, flat)
        else:
            _unlabelled_strip(ax, title)
    return figure


def _unlabelled_strip(ax, title: str) -> None:
    """The strip of a split without class counts: its title and a line that says so."""
    ax.set_title(title, fontsize=10)
    ax.text(
        0.5,
        0.5,
        "unlabelled split (label -1): no class counts",
        ha="center",
        va="center",
        transform=ax.transAxes,
    )
    ax.set_axis_off()


def _bar_chart(ax, info: DatasetInfo, split: str, title: str, top: int, flat: bool) -> None:
    """One split's bars, each labelled with its count; names flat under them when they fit."""
    from matplotlib.ticker import MaxNLocator

    names = [class_title(info.display_names, name) for name in info.class_list.names]
    many = len(names) > 2 * top
    shown, counts = histogram_bars(info, split, top)
    positions = list(range(len(shown)))
    if many:  # a gap between the most and the least frequent
        positions = positions[:top] + [p + 1 for p in positions[top:]]
        title += (
            f"; the {top} most and {top} least frequent of {len(names)} classes "
            f"({len(names) - 2 * top} in between not shown)"
        )
    colours = [
        tuple(c / 255 for c in class_colour(names.index(name), info.background_index))
        for name in shown
    ]
    container = ax.bar(positions, counts, color=colours, edgecolor="#333333", linewidth=0.6)
    if len(shown) <= 2 * top:
        ax.bar_label(container, fontsize=7 if many else 8, padding=1)
    labels = [name[:40] for name in shown]
    if flat:
        ax.set_xticks(positions, labels, fontsize=9)
    else:
        ax.set_xticks(positions, labels, rotation=90, fontsize=8 if many else 9)
    ax.set_xlim(min(positions) - 0.7, max(positions) + 0.7)
    ax.set_ylim(0, max(max(counts), 1) * 1.15)
    ax.set_ylabel("examples")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
