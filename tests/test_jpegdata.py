"""The bytes a build stores for a JPEG are bytes libjpeg-turbo decodes strictly to the end.

Each case here was stored before with exit 0 and failed a reader (or showed a guessed picture):
found by a new-user trial (random mutations of real photos) and by `benchmarks/jpeg_damage.py`.
"""

import io

import numpy as np
import pytest
import simplejpeg
import tensorflow as tf
from helpers import CORPUS, build, dead_letters, ilsvrc_image, read_split
from PIL import Image

from beam_pipeline.core import jpegdata
from beam_pipeline.core.images import ImagePolicy, normalise_image
from beam_pipeline.core.rejections import InputError
from beam_pipeline.failures import BuildFailed
from beam_pipeline.tools import verify

PHOTO = CORPUS / "images" / "tfrecorder" / "TRAIN" / "cat" / "cat-640x853-1.jpg"
DEFAULT = ImagePolicy()
KEEP_STRAY = ImagePolicy(keep_stray_jpeg_bytes=True)


def encoded(**settings) -> bytes:
    out = io.BytesIO()
    Image.open(PHOTO).save(out, "JPEG", quality=90, **settings)
    return out.getvalue()


def decodes_in_every_reader(data: bytes) -> np.ndarray:
    """The pixels, after Pillow, `tf.io.decode_jpeg` and strict libjpeg-turbo decoded them."""
    with Image.open(io.BytesIO(data)) as image:
        pillow = np.asarray(image.convert("RGB"))
    assert tf.io.decode_jpeg(data, channels=3).shape == pillow.shape
    return simplejpeg.decode_jpeg(data, strict=True)


def first_marker_after_data(data: bytes) -> int:
    """Where the marker that ends the first scan's data starts."""
    (_, end, _), *_ = jpegdata._scans(data)
    return end


def test_stray_bytes_after_the_data_and_no_end_are_never_stored():
    # From a new-user trial: mutations left bytes after the data, before a marker ("148
    # extraneous bytes before marker 0xe2"), and no end marker; the check stopped at the
    # warning, took it as harmless and stored a file TensorFlow cannot decode
    # ("jpeg::Uncompress failed"), exit 0.
    data = encoded()
    end = first_marker_after_data(data)
    damaged = data[:end] + b"\x55" * 148 + b"\xff\xe2\x00\x04ab"
    with pytest.raises(ValueError, match="147 extraneous bytes before marker 0xe2"):
        simplejpeg.decode_jpeg(damaged, strict=True)
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_jpeg(damaged)
    with pytest.raises(InputError) as error:
        normalise_image(damaged, DEFAULT)
    assert error.value.reason == "stray_jpeg_bytes"
    with pytest.raises(InputError) as error:  # without them: it ends before its end marker
        normalise_image(damaged, KEEP_STRAY)
    assert error.value.reason == "truncated_image"


@pytest.mark.parametrize("progressive", [False, True])
def test_bytes_after_the_end_marker_are_not_stored(progressive):
    # A phone's Motion Photo: the JPEG, then its video (3 MB), stored with it byte for byte,
    # not a word said: shards 5 times their pictures' size. An end marker inside the video
    # does not end the picture there.
    data = encoded(progressive=progressive)
    video = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40 + b"\xff\xd9\xff\xd8tail"
    stored = normalise_image(data + video, DEFAULT)
    assert stored.data == data
    assert (decodes_in_every_reader(stored.data) == simplejpeg.decode_jpeg(data)).all()
    assert normalise_image(data + b"\x00" * 7, DEFAULT).data == data  # padding
    # A second image after the first ends with its own end marker (MPF's): kept as it is.
    assert normalise_image(data + data, DEFAULT).data == data + data


def test_a_progressive_scan_that_ended_early_is_refused_or_mended_and_checked_to_the_end():
    data = encoded(progressive=True)
    end = first_marker_after_data(data)
    assert data[end + 1] in (0xC4, 0xDA)  # the next scan's table or header
    damaged = data[:end] + bytes(40) + data[end:]
    with pytest.raises(InputError) as error:
        normalise_image(damaged, DEFAULT)
    assert error.value.reason == "stray_jpeg_bytes"
    kept = normalise_image(damaged, KEEP_STRAY)
    assert len(data) <= len(kept.data) < len(damaged)  # a few stay, unread in the bit buffer
    assert "kept (--keep_stray_jpeg_bytes)" in kept.note
    assert np.array_equal(decodes_in_every_reader(kept.data), decodes_in_every_reader(data))
    # Later scans are checked too: the stray bytes no longer stop the check before them.
    with pytest.raises(InputError) as error:
        normalise_image(damaged[: len(damaged) - 2000] + b"\xff\xd9", KEEP_STRAY)
    assert error.value.reason in ("corrupt_image", "truncated_image")


def test_scan_header_fields_a_sequential_decoder_ignores_do_not_hide_the_data():
    # "Invalid SOS parameters for sequential JPEG" is warned at the scan header, before any of
    # its data is read: strict mode stopped there, and a cut file behind it was stored.
    data = bytearray(encoded())
    header_end = jpegdata._scans(bytes(data))[0][0]
    data[header_end - 2] = 0x10  # Se = 16
    odd = bytes(data)
    with pytest.raises(ValueError, match="Invalid SOS parameters"):
        simplejpeg.decode_jpeg(odd, strict=True)
    stored = normalise_image(odd, DEFAULT)
    assert not stored.note and len(stored.data) == len(odd)
    with Image.open(io.BytesIO(odd)) as image:
        assert np.array_equal(decodes_in_every_reader(stored.data), np.asarray(image))
    with pytest.raises(InputError) as error:
        normalise_image(odd[: len(odd) * 2 // 3], DEFAULT)
    assert error.value.reason in ("truncated_image", "corrupt_image")


def test_a_thumbnail_inside_app1_is_not_taken_for_the_image_scan():
    thumbnail = encoded()[:4000]  # holds an SOS marker of its own
    app1 = b"\xff\xe1" + (len(thumbnail) + 2).to_bytes(2, "big") + thumbnail
    data = encoded(progressive=True)
    with_app1 = data[:2] + app1 + data[2:]
    ends = [end - len(app1) for _, end, _ in jpegdata._scans(with_app1)]
    assert ends == [end for _, end, _ in jpegdata._scans(data)]
    assert normalise_image(with_app1, DEFAULT).data == with_app1


def cut_at_each_scan(data: bytes) -> list[bytes]:
    """`data` cut before each scan after the first, closed with EOI."""
    markers = [i for i in range(2, len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    return [data[:at] + b"\xff\xd9" for at in markers[1:]]


def test_a_progressive_jpeg_cut_at_a_scan_and_closed_is_refused_not_stored_blurred():
    # An adversarial trial: a progressive photo cut where a scan starts, EOI added, decodes
    # with no warning (every reader shows the scans it has: blurred, 17/255 off on average)
    # and was stored, exit 0; cut anywhere else it was refused.
    data = encoded(progressive=True)
    assert normalise_image(data, DEFAULT).data == data
    cuts = cut_at_each_scan(data)
    assert len(cuts) == 9
    for number, cut in enumerate(cuts, 1):
        decodes_in_every_reader(cut)  # (why it passed)
        with pytest.raises(InputError) as error:
            normalise_image(cut, DEFAULT)
        assert error.value.reason == "truncated_image", number
        assert str(error.value).startswith(
            "truncated_image: JPEG: its scans end before its data does (component "
        )
        assert str(error.value).endswith(
            "): the file was cut short at a scan's end and closed (decoded anyway, blurred or "
            "without a colour)"
        )
    said = [jpegdata._unsent(cut) for cut in cuts]
    assert said[0] == "component 1's coefficients 1-63 never sent, 0 sent to bit 1 only"
    assert said[-1] == "component 1's coefficients 1-63 sent to bit 1 only"
    for policy in (ImagePolicy(mode="shorter_side", size=(64,)), KEEP_STRAY):
        with pytest.raises(InputError, match="its scans end before its data does"):
            normalise_image(cuts[3], policy)  # converted, or kept with stray bytes: the same


def test_a_sequential_jpeg_whose_scans_leave_a_component_out_is_refused():
    # Non-interleaved sequential data (one component a scan) cut after its second scan: the
    # third component is in no scan. (Headers only: `_unsent` reads no entropy-coded data.)
    components = b"".join(bytes([c, 0x11, 0]) for c in (1, 2, 3))
    frame = b"\xff\xc0" + (8 + 9).to_bytes(2, "big") + b"\x08\x00\x10\x00\x10\x03" + components

    def scan(component: int) -> bytes:
        return b"\xff\xda\x00\x08\x01" + bytes([component, 0]) + b"\x00\x3f\x00" + b"\x12" * 8

    head = b"\xff\xd8" + frame
    assert jpegdata._unsent(head + scan(1) + scan(2) + scan(3) + b"\xff\xd9") is None
    cut = head + scan(1) + scan(2) + b"\xff\xd9"
    assert jpegdata._unsent(cut) == "component 3 is in no scan"
    interleaved = b"\xff\xda\x00\x0c\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00"
    assert jpegdata._unsent(head + interleaved + b"\x12" * 8 + b"\xff\xd9") is None


def test_a_build_rejects_a_progressive_jpeg_cut_at_a_scan(tmp_path):
    clean = encoded(progressive=True)
    for stem in ("a", "b"):
        ilsvrc_image(tmp_path / "tree", "train", f"n01440764/{stem}", clean, task="CLS-LOC")
    ilsvrc_image(
        tmp_path / "tree", "train", "n01440764/cut", cut_at_each_scan(clean)[4], task="CLS-LOC"
    )
    info = build(tmp_path / "tree", tmp_path / "out", "--splits", "train", "--max_bad_fraction", 1)
    assert info.splits["train"].num_examples == 2
    (line,) = dead_letters(tmp_path / "out")
    assert line["path"] == str(tmp_path / "tree/Data/CLS-LOC/train/n01440764/cut.JPEG")
    assert (line["reason"], line["is_image"]) == ("truncated_image", True)
    assert "its scans end before its data does (component 1's coefficients" in line["detail"]


def test_a_build_refuses_stray_bytes_or_keeps_them_on_the_flag_as_reported(tmp_path):
    clean = encoded()
    stray = clean[:-2] + bytes(16) + b"\xff\xd9"
    for stem in ("a", "b", "c"):
        ilsvrc_image(tmp_path / "tree", "train", f"n01440764/{stem}", clean, task="CLS-LOC")
    ilsvrc_image(tmp_path / "tree", "train", "n01440764/stray", stray, task="CLS-LOC")
    path = str(tmp_path / "tree/Data/CLS-LOC/train/n01440764/stray.JPEG")
    info = build(tmp_path / "tree", tmp_path / "out", "--splits", "train", "--max_bad_fraction", 1)
    assert info.splits["train"].num_examples == 3
    assert info.options["image_policy"]["stray_jpeg_bytes"] == "rejected"
    (line,) = dead_letters(tmp_path / "out")
    assert (line["path"], line["reason"], line["is_image"]) == (path, "stray_jpeg_bytes", True)
    assert "--keep_stray_jpeg_bytes keeps such images" in line["detail"]

    kept = tmp_path / "kept"
    info = build(tmp_path / "tree", kept, "--splits", "train", "--keep_stray_jpeg_bytes")
    assert info.splits["train"].num_examples == 4 and info.splits["train"].num_rejected == 0
    assert info.options["image_policy"]["stray_jpeg_bytes"] == "kept, reported"
    (line,) = dead_letters(tmp_path / "kept")
    assert (line["path"], line["reason"]) == (path, "stray_jpeg_bytes_kept")
    assert line["is_image"] is False
    assert line["detail"].endswith("kept (--keep_stray_jpeg_bytes) without them, may be garbled")
    for example in read_split(tmp_path / "kept", "train"):
        decodes_in_every_reader(example["image/encoded"][0])
    assert verify.verify(str(kept)) == (1, [])  # its account of rejections, its strict check


def test_a_build_over_its_budget_for_stray_bytes_names_the_flag(tmp_path):
    clean = encoded()
    ilsvrc_image(tmp_path / "tree", "train", "n01440764/a", clean, task="CLS-LOC")
    ilsvrc_image(
        tmp_path / "tree",
        "train",
        "n01440764/b",
        clean[:-2] + bytes(16) + b"\xff\xd9",
        task="CLS-LOC",
    )
    with pytest.raises(BuildFailed) as failed:
        build(tmp_path / "tree", tmp_path / "out", "--splits", "train")
    assert (
        "1 of 2 images rejected (50.00%), more than --max_bad_fraction=0.01; reasons "
        "{'stray_jpeg_bytes': 1} (1 stray_jpeg_bytes: JPEGs whose scan ended before their data, "
        "usually damaged and garbled; --keep_stray_jpeg_bytes keeps them, reported)"
    ) in str(failed.value)
