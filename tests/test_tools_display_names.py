"""`show` and `stats` name a class with the display name the build knows (`--labels_file
LOC_synset_mapping.txt`): `n01440764 tench` in captions, the histogram and the class lines,
`tench` on a box; `show --class` takes the class or a name it lists. A build without display names
prints its classes as before (tests/test_show.py, tests/test_plan_and_stats.py)."""

import json

import pytest
from helpers import build, ilsvrc_image, jpeg_bytes, write

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.tools import build_records, commands, histogram, show
from schemas import BUILD_INFO_FILE, DatasetInfo

MAPPING = (
    "n01440764 tench, Tinca tinca\n"
    "n01443537 goldfish, Carassius auratus\n"
    "n02012849 crane\n"
    "n03126707 crane\n"
)
TITLES = ["n01440764 tench", "n01443537 goldfish", "n02012849 crane", "n03126707 crane"]
# Images per class folder of train: 2 tench (one with a box), 3 goldfish, 1 of each crane.
COUNTS = {"n01440764": 2, "n01443537": 3, "n02012849": 1, "n03126707": 1}


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    tree = tmp_path_factory.mktemp("tree")
    for synset, count in COUNTS.items():
        for n in range(count):
            xml = None
            if (synset, n) == ("n01440764", 0):
                xml = voc_xml([(synset, 2, 2, 40, 30)], size=(64, 48))
            ilsvrc_image(tree, "train", f"{synset}/{synset}_{n}", jpeg_bytes(), xml, "CLS-LOC")
    labels = write(tree.parent / f"{tree.name}-LOC_synset_mapping.txt", MAPPING)
    out = tmp_path_factory.mktemp("out")
    build(tree, out, "--labels_file", labels, "--splits", "train")
    return out


def run(capsys, *argv):
    code = commands.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err.strip()


def test_the_sheet_captions_a_class_with_its_display_name_and_a_box_with_the_name(named):
    _, tiles = show.contact_sheet(str(named), "train", n=100)
    assert len(tiles) == 7
    assert sorted(tile.caption for tile in tiles) == sorted(
        title for title, count in zip(TITLES, COUNTS.values(), strict=True) for _ in range(count)
    )
    (boxed,) = [tile for tile in tiles if tile.boxes]
    assert boxed.caption == "n01440764 tench"
    assert [(box.name, box.label) for box in boxed.boxes] == [("tench", 0)]


@pytest.mark.parametrize("name", ["n01440764", "tench", "Tench", "Tinca tinca", "n01440764 tench"])
def test_class_takes_the_class_or_a_name_its_display_name_lists(named, tmp_path, capsys, name):
    target = tmp_path / "sheet.png"
    code, out, err = run(capsys, "show", named, "--class", name, "-o", target)
    assert (code, err) == (0, "")
    assert out == f"wrote {target}: 2 of 2 train examples of class n01440764 tench (seed 0)"
    _, tiles = show.contact_sheet(str(named), "train", class_name=name)
    assert {(tile.label, tile.caption) for tile in tiles} == {(0, "n01440764 tench")}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "crane",
            "error: --class 'crane' names 2 classes (n02012849 crane, n03126707 crane); name one "
            "by its class, e.g. --class n02012849",
        ),
        (
            "tnech",
            "error: unknown class 'tnech': this build has 4 classes (n01440764 tench, n01443537 "
            "goldfish, n02012849 crane, n03126707 crane); did you mean n01440764 tench?",
        ),
    ],
)
def test_a_class_name_shared_or_unknown_exits_2_naming_the_classes(
    named, tmp_path, capsys, name, message
):
    code, out, err = run(capsys, "show", named, "--class", name, "-o", tmp_path / "x.png")
    assert (code, out, err) == (2, "", message)


def test_the_histogram_names_each_bar_with_its_display_name(named):
    info = DatasetInfo.from_json((named / BUILD_INFO_FILE).read_text())
    names, counts = histogram.histogram_bars(info, "train")
    # No image of the build is background (CLS-LOC): no bar for it.
    assert names == TITLES and counts == list(COUNTS.values())
    (ax,) = histogram.class_histogram(info).axes
    assert [label.get_text() for label in ax.get_xticklabels()] == TITLES


def test_stats_names_the_rarest_and_commonest_with_their_display_names(named, capsys):
    code, out, _ = run(capsys, "stats", named)
    assert code == 0
    lines = out.splitlines()
    # No image is background here: "background 0" was no news (nor is its key in class_counts).
    assert lines[3] == "  examples per class: min 1, median 1.5, max 3; imbalance (max/min) 3.00"
    from loaders import dataset_info

    assert "background" not in dataset_info(named).class_counts("train")
    assert lines[4] == (
        "  rarest: n02012849 crane 1, n03126707 crane 1, n01440764 tench 2, n01443537 goldfish 3"
    )
    assert lines[5] == (
        "  commonest: n01443537 goldfish 3, n01440764 tench 2, n02012849 crane 1, n03126707 crane 1"
    )
    # --json keeps the classes' ids where it ranks them, and gives the display names apart.
    code, out, _ = run(capsys, "stats", named, "--json")
    numbers = json.loads(out)
    assert numbers["splits"]["train"]["classes"]["rarest"][0] == ["n02012849", 1]
    assert numbers["display_names"] == {
        "n01440764": "tench, Tinca tinca",
        "n01443537": "goldfish, Carassius auratus",
        "n02012849": "crane",
        "n03126707": "crane",
    }


def test_a_long_display_name_is_cut_where_a_person_reads_it():
    names = {"n1": "a" * 40 + ", other", "n2": "n2", "n3": " short , other"}
    assert build_records.class_title(names, "n1") == f"n1 {'a' * 29}…"
    assert build_records.class_title(names, "n2") == "n2"  # its display name is itself
    assert build_records.class_title(names, "n3") == "n3 short"
    assert build_records.class_title(names, "n4") == "n4"


def test_the_histogram_of_a_build_without_background_does_not_say_background(
    named, tmp_path, capsys
):
    # "(4 classes and background; ...)" was printed for a build with no background bar.
    code, out, _ = run(capsys, "show", named, "--histogram", "-o", str(tmp_path / "h.png"))
    assert code == 0 and "(4 classes; " in out and "background" not in out
