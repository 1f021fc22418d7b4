"""Every kind of bad input, through one real build: what is written, what is rejected and why."""

import collections
import io
import socket
import threading

import numpy as np
import pytest
from helpers import CORPUS, build, dead_letters, decode, jpeg_bytes, read_split, write
from PIL import Image

from beam_pipeline.core.annotations import voc_xml
from schemas import features as F

PILLOW = CORPUS / "images" / "pillow"
ATTACKS = CORPUS / "xml_attacks_defusedxml"
SECRET = "TOP-SECRET-CONTENT-7f3a"


def pillow(name):
    return (PILLOW / name).read_bytes()


def png_of(width, height):
    out = io.BytesIO()
    Image.new("RGB", (width, height), (90, 90, 90)).save(out, format="PNG")
    return out.getvalue()


def float_tiff():
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8), 0.5, np.float32), "F").save(out, format="TIFF")
    return out.getvalue()


@pytest.fixture(scope="module")
def listener():
    """A loopback TCP server that records every connection (there must be none)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    connections = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connections.append(connection)
                connection.close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connections
    stop.set()
    thread.join()
    server.close()


def case_table(port, secret_path):
    box = [("cat", 10, 10, 100, 100)]
    xxe = (
        f'<!DOCTYPE a [<!ENTITY x SYSTEM "file://{secret_path}">]>'
        "<annotation><object><name>&x;</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
        "<xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>"
    )
    xxe_net = xxe.replace(f"file://{secret_path}", f"http://127.0.0.1:{port}/secret")
    dtd = f'<!DOCTYPE annotation SYSTEM "http://127.0.0.1:{port}/voc.dtd">' + voc_xml(
        [("dog", 1, 1, 30, 30)], size=(64, 48)
    )
    # stem: (image bytes or None, xml text or None, expected)
    return {
        "ok_rgb": (jpeg_bytes(), voc_xml([("dog", 8, 4, 40, 20)], size=(64, 48)), "kept"),
        "trunc_jpeg": (pillow("truncated_jpeg.jpg"), None, ("image", "truncated_image")),
        "trunc_png": (pillow("truncated_image.png"), None, ("image", "truncated_image")),
        "corrupt_stream": (pillow("broken_data_stream.png"), None, ("image", "corrupt_image")),
        "zero_byte": (b"", None, ("image", "empty_file")),
        "text_named_jpeg": (b"just some text\n", None, ("image", "not_an_image")),
        "png_named_jpeg": (pillow("hopper.png"), voc_xml(box), (128, 128)),
        "gif_named_jpeg": (pillow("hopper.gif"), voc_xml(box), (128, 128)),
        "cmyk": (pillow("pil_sample_cmyk.jpg"), voc_xml([("cat", 1, 1, 50, 50)]), (100, 100)),
        "grayscale": (pillow("hopper_gray.jpg"), None, (128, 128)),
        "palette": (pillow("p_trns_single.png"), None, (64, 64)),
        "la": (pillow("200x32_la.png"), None, (32, 200)),
        "rgba": (pillow("transparent.png"), None, (150, 200)),
        "png_16bit": (pillow("i_trns.png"), None, (64, 64)),
        "rgb_colour_key": (pillow("rgb_trns.png"), None, (64, 64)),
        "banner_70000": (png_of(70000, 2), None, ("image", "image_too_large")),
        "float_tiff": (float_tiff(), None, ("image", "unsupported_image")),
        "bm_text": (b"BMW service record\n", None, ("image", "not_an_image")),
        "one_pixel": (pillow("jfif_unit_cm.jpg"), None, (1, 1)),
        "progressive": (pillow("app13-multiple.jpg"), None, "kept"),
        # The decoder finished the scan before the data (damage, nearly always garbled).
        "stray_before_end": (
            jpeg_bytes()[:-2] + bytes(6) + b"\xff\xd9",
            None,
            ("image", "stray_jpeg_bytes"),
        ),
        **{
            f"exif_{n}": (
                pillow(f"hopper_orientation_{n}.jpg"),
                voc_xml([("cat", 16, 32, 64, 96)], size=(128, 128)),
                "kept",
            )
            for n in range(2, 9)
        },
        "bomb_gif": (pillow("decompression_bomb.gif"), None, ("image", "decompression_bomb")),
        "bomb_png": (pillow("png_decompression_dos.png"), None, ("image", "decompression_bomb")),
        "size_mismatch": (jpeg_bytes(), voc_xml(box, size=(100, 100)), ("image", "size_mismatch")),
        "xml_truncated": (jpeg_bytes(), voc_xml(box)[:40], ("annotation", "annotation_malformed")),
        "xml_empty": (jpeg_bytes(), "", ("annotation", "annotation_empty")),
        "no_size": (jpeg_bytes(), voc_xml([("cat", 16, 12, 32, 24)]), "kept"),
        # Without <size>, the largest box is still measured inside the image: the dog's box
        # is 4x48 px there (unclamped, ~10,000x48), the cat's 30x30.
        "no_size_clamped": (
            jpeg_bytes(),
            voc_xml([("dog", 60, 0, 10000, 48), ("cat", 0, 0, 30, 30)]),
            "kept",
        ),
        "float_coords": (
            jpeg_bytes(),
            voc_xml([("cat", 6.4, 4.8, 32.0, 24.0)], size=(64, 48)),
            "kept",
        ),
        "out_of_bounds": (jpeg_bytes(), voc_xml([("cat", -5, -5, 100, 24)], size=(64, 48)), "kept"),
        "min_gt_max": (
            jpeg_bytes(),
            voc_xml([("cat", 30, 5, 10, 20)]),
            ("annotation", "annotation_degenerate_box"),
        ),
        "zero_area": (
            jpeg_bytes(),
            voc_xml([("cat", 10, 5, 10, 20)]),
            ("annotation", "annotation_degenerate_box"),
        ),
        "box_outside": (
            jpeg_bytes(),
            voc_xml([("cat", 70, 50, 90, 60)]),
            ("image", "annotation_box_outside_image"),
        ),
        # With <size>, the XML alone tells: rejected by the index (and named by `plan`).
        "box_outside_size": (
            jpeg_bytes(),
            voc_xml([("cat", 5, 5, 20, 20), ("dog", 70, 50, 90, 60)], size=(64, 48)),
            ("annotation", "annotation_box_outside_image"),
        ),
        "nested_part": (
            (CORPUS / "datumaro/voc_dataset/voc_dataset1/JPEGImages/2007_000001.jpg").read_bytes(),
            (CORPUS / "datumaro/voc_dataset/voc_dataset1/Annotations/2007_000001.xml")
            .read_text()
            .replace("person", "dog"),
            "kept",
        ),
        "no_flags": (
            jpeg_bytes(),
            "<annotation><object><name>dog</name><bndbox><xmin>1</xmin>"
            "<ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>",
            "kept",
        ),
        "filename_lies": (
            jpeg_bytes(),
            voc_xml(box, filename="../../etc/%s.jpg"),
            "kept",
        ),
        "no_xml": (jpeg_bytes(), None, "kept"),
        "no_objects": (jpeg_bytes(), voc_xml([], size=(64, 48)), "kept"),
        "orphan_xml": (None, voc_xml(box), ("discover", "annotation_without_image")),
        "xxe_file": (jpeg_bytes(), xxe, ("annotation", "annotation_entities_forbidden")),
        "xxe_network": (jpeg_bytes(), xxe_net, ("annotation", "annotation_entities_forbidden")),
        "billion_laughs": (
            jpeg_bytes(),
            (ATTACKS / "xmlbomb.xml").read_text(),
            ("annotation", "annotation_entities_forbidden"),
        ),
        "quadratic_blowup": (
            jpeg_bytes(),
            (ATTACKS / "quadratic.xml").read_text(),
            ("annotation", "annotation_malformed"),
        ),
        "external_dtd": (jpeg_bytes(), dtd, "kept"),
    }


@pytest.fixture(scope="module")
def outcome(tmp_path_factory, listener):
    port, connections = listener
    root = tmp_path_factory.mktemp("tree")
    secret = write(root.parent / "secret.txt", SECRET)
    cases = case_table(port, secret)
    for stem, (image, xml, _) in cases.items():
        if image is not None:
            write(root / "Data/DET/train/cases" / f"{stem}.JPEG", image)
        if xml is not None:
            write(root / "Annotations/DET/train/cases" / f"{stem}.xml", xml)
    # The validation split names a class the train split never saw.
    write(root / "Data/DET/val/unknown_class.JPEG", jpeg_bytes())
    write(root / "Annotations/DET/val/unknown_class.xml", voc_xml([("unicorn", 1, 1, 9, 9)]))
    write(root / "Data/DET/val/fine.JPEG", jpeg_bytes())
    out = tmp_path_factory.mktemp("out")
    info = build(root, out, "--max_bad_fraction", "1.0")
    return cases, info, out, connections


def examples_by_stem(out):
    return {e[F.SOURCE_ID][0].decode().rsplit("/", 1)[1]: e for e in read_split(out, "train")}


def test_every_case_has_its_expected_outcome(outcome):
    cases, _, out, _ = outcome
    written = examples_by_stem(out)
    rejected = {
        d["path"].rsplit("/", 1)[1].rsplit(".", 1)[0]: (d["stage"], d["reason"])
        for d in dead_letters(out)
        if d["split"] == "train"
    }
    for stem, (_, _, expected) in cases.items():
        if isinstance(expected, tuple) and isinstance(expected[0], str):
            assert rejected.get(stem) == expected, stem
            assert stem not in written, stem
        else:
            assert stem in written and stem not in rejected, stem


def test_accounting_holds_per_split(outcome):
    cases, info, out, _ = outcome
    images = [s for s, (image, _, _) in cases.items() if image is not None]
    rejected_images = [
        s
        for s, (image, _, e) in cases.items()
        if image is not None and isinstance(e[0], str) and len(e) == 2
    ]
    train = info.splits["train"]
    assert train.num_discovered == len(images)
    assert train.num_rejected == len(rejected_images)
    assert train.num_examples == len(images) - len(rejected_images)
    val = info.splits["validation"]
    assert (val.num_discovered, val.num_examples, val.num_rejected) == (2, 1, 1)
    assert [d["reason"] for d in dead_letters(out) if d["split"] == "validation"] == [
        "unknown_class"
    ]


def test_every_image_is_written_or_named_once_in_rejected_jsonl(outcome):
    # An image its XML cost was named only by the XML's path: now `image` names it.
    cases, _, out, _ = outcome
    written = examples_by_stem(out)
    named = collections.Counter(
        d.get("image", d["path"]).rsplit("/Data/DET/train/cases/", 1)[-1]
        for d in dead_letters(out)
        if d["is_image"] and d["split"] == "train"
    )
    images = [stem for stem, (image, _, _) in cases.items() if image is not None]
    assert sorted(named.elements()) == sorted(f"{s}.JPEG" for s in images if s not in written)
    xml_stage = [d for d in dead_letters(out) if d["stage"] == "annotation"]
    assert xml_stage and all(
        d["path"].endswith(".xml") and d["image"].endswith(".JPEG") for d in xml_stage
    )
    assert all("image" not in d for d in dead_letters(out) if d["stage"] == "image")


def test_converted_images_have_the_expected_rgb_size(outcome):
    cases, _, out, _ = outcome
    written = examples_by_stem(out)
    for stem, (image, _, expected) in cases.items():
        if isinstance(expected, tuple) and isinstance(expected[0], int):
            pixels = decode(written[stem])
            assert pixels.shape == (*expected, 3), stem
            assert (written[stem][F.HEIGHT], written[stem][F.WIDTH]) == (
                [expected[0]],
                [expected[1]],
            )
            assert written[stem][F.ENCODED][0] != image, stem  # re-encoded
    rgba = decode(written["rgba"]).astype(int)
    assert np.abs(rgba[0, 0] - [255, 255, 255]).max() < 10  # transparent corner → white
    # An RGB PNG's transparent colour key is white too (it was stored as the key colour).
    key = np.asarray(Image.open(PILLOW / "rgb_trns.png").convert("RGBA"))[..., 3] == 0
    assert decode(written["rgb_colour_key"])[key].mean() > 250


def test_valid_rgb_jpegs_keep_their_bytes_and_exif_is_not_applied(outcome):
    cases, _, out, _ = outcome
    written = examples_by_stem(out)
    for stem in ["ok_rgb", "progressive", *(f"exif_{n}" for n in range(2, 9))]:
        assert written[stem][F.ENCODED][0] == cases[stem][0], stem
    for n in range(2, 9):  # boxes refer to the stored pixels, as the XML does
        example = written[f"exif_{n}"]
        assert example[F.BBOX_XMIN] == pytest.approx([16 / 128])
        assert example[F.BBOX_YMIN] == pytest.approx([32 / 128])
        assert example[F.BBOX_XMAX] == pytest.approx([64 / 128])
        assert example[F.BBOX_YMAX] == pytest.approx([96 / 128])


def test_annotation_edge_cases_are_read_as_documented(outcome):
    _, info, out, _ = outcome
    written = examples_by_stem(out)
    cat, dog, background = (
        info.classes.index("cat"),
        info.classes.index("dog"),
        info.background_index,
    )
    assert written["no_size"][F.BBOX_XMIN] == pytest.approx([16 / 64])  # by the decoded size
    assert written["no_size_clamped"][F.LABEL] == [cat]
    assert written["no_size_clamped"][F.BBOX_XMIN] == pytest.approx([60 / 64, 0.0])
    assert written["float_coords"][F.BBOX_XMIN] == pytest.approx([0.1])
    assert written["out_of_bounds"][F.BBOX_XMIN] == pytest.approx([0.0])  # clamped
    assert written["out_of_bounds"][F.BBOX_XMAX] == pytest.approx([1.0])
    nested = written["nested_part"]
    assert nested[F.OBJECT_TEXT] == [b"cat", b"dog"]
    assert nested[F.BBOX_XMIN] == pytest.approx(
        [1 / 20, 4 / 20]
    )  # the object's box, not the part's
    assert written["no_flags"][F.OBJECT_DIFFICULT] == [0]
    assert written["no_flags"][F.OBJECT_TRUNCATED] == [0]
    assert written["no_flags"][F.LABEL] == [dog]
    assert written["filename_lies"][F.FILENAME] == [b"Data/DET/train/cases/filename_lies.JPEG"]
    assert written["filename_lies"][F.LABEL] == [cat]
    assert written["no_xml"][F.LABEL] == [background]
    assert written["no_objects"][F.LABEL] == [background]
    assert written["external_dtd"][F.LABEL] == [dog]


def test_attacks_leak_nothing_and_touch_no_network(outcome):
    _, _, out, connections = outcome
    assert connections == []
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
