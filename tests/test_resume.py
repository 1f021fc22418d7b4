"""Progress records, which `--resume` trusts: what they fingerprint and when they are refused."""

import hashlib
import json

import pytest

from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.core.entries import IndexEntry, LabelledEntry, ShardResult
from beam_pipeline.core.images import ImagePolicy
from beam_pipeline.core.labels import Vocabulary
from beam_pipeline.core.quality.duplicates import ImagePrint
from beam_pipeline.core.rejections import IMAGE, Rejection
from beam_pipeline.stages import resume
from schemas import ShardInfo

VOCAB = Vocabulary(("cat", "dog"))
POLICY = ImagePolicy()
SHARD = "train-00000-of-00002.tfrecord"
DATA = b"the shard's bytes"


def member(rank, stem, label=0, file_version=0):
    entry = IndexEntry(
        "train", f"train/{stem}", f"Data/{stem}.JPEG", None, None, 1000 + rank, file_version
    )
    objects = (AnnotatedObject("cat", Box(1, 2, 30, 40), False, False),)
    return rank, LabelledEntry(entry, Annotation(64, 48, objects), label, (0,), "xml")


MEMBERS = [member(0, "a"), member(1, "b", label=2)]


def fingerprint(**changes):
    args = {
        "split": "train",
        "index": 0,
        "num_shards": 2,
        "members": MEMBERS,
        "vocabulary": VOCAB,
        "policy": POLICY,
    }
    args.update(changes)
    return resume.fingerprint(**args)


@pytest.mark.parametrize(
    "change",
    [
        {"split": "validation"},
        {"index": 1},
        {"num_shards": 3},
        {"members": MEMBERS[:1]},
        {"members": [member(0, "a"), member(1, "b", label=1)]},
        {"members": [member(0, "a"), member(2, "b", label=2)]},
        # An image replaced since by one of the same size: its modification time tells.
        {"members": [member(0, "a"), member(1, "b", label=2, file_version=1)]},
        {"vocabulary": Vocabulary(("cat", "dog", "eel"))},
        {"policy": ImagePolicy(jpeg_quality=90)},
    ],
)
def test_fingerprint_changes_with_everything_that_decides_the_shard_bytes(change):
    assert fingerprint(**change) != fingerprint()


def test_fingerprint_is_stable():
    assert fingerprint() == fingerprint(members=list(MEMBERS))
    assert len(fingerprint()) == 64


@pytest.fixture
def recorded(tmp_path):
    """An output directory with one shard in place and its progress record."""
    (tmp_path / SHARD).write_bytes(DATA)
    shard = ShardInfo(SHARD, 2, len(DATA), hashlib.sha256(DATA).hexdigest())
    result = ShardResult("train", 0, 2, shard, ((0, 1), (2, 1)))
    rejections = [Rejection("train", "/tree/c.JPEG", IMAGE, "truncated_image", "cut")]
    prints = [
        ImagePrint("train", "a.JPEG", 0, bytes(range(16)), 2**64 - 1, 40, None, 64, 48),
        ImagePrint("train", "b.JPEG", 2, b"\xff" * 16, 0, 3, 17, 1, 1),
    ]
    resume.save(str(tmp_path), fingerprint(), result, rejections, prints, "/tree")
    return tmp_path, result, rejections, prints


def test_a_recorded_intact_shard_is_loaded_back_exactly(recorded):
    out, result, rejections, prints = recorded
    assert [p.name for p in (out / ".progress").iterdir()] == [f"{SHARD}.json"]
    loaded = resume.load_completed(str(out), SHARD, fingerprint(), "/tree")
    assert loaded == (result, rejections, prints)
    assert list((out / ".tmp").iterdir()) == []  # written through a temp file, renamed


def test_a_kept_shards_rejections_are_said_in_the_tree_as_it_is_now(recorded):
    # The tree moved (copied elsewhere) since: its rejected.jsonl named the old paths.
    out, _, rejections, _ = recorded
    loaded = resume.load_completed(str(out), SHARD, fingerprint(), "/moved/tree2/")
    assert loaded is not None and [r.path for r in loaded[1]] == ["/moved/tree2/c.JPEG"]
    assert loaded[1][0].detail == rejections[0].detail


def test_a_record_of_a_version_that_did_not_keep_the_tree_s_place_is_taken_as_not_moved(
    recorded,
):
    out, result, rejections, prints = recorded
    record = out / ".progress" / f"{SHARD}.json"
    fields = json.loads(record.read_text())
    del fields["input_dir"]
    record.write_text(json.dumps(fields))
    assert resume.load_completed(str(out), SHARD, fingerprint(), "/tree") == (
        result,
        rejections,
        prints,
    )


def test_another_plan_does_not_trust_the_record(recorded):
    out, *_ = recorded
    assert resume.load_completed(str(out), SHARD, fingerprint(num_shards=3), "/tree") is None


@pytest.mark.parametrize("damage", [b"the shard's bytez", b"the shard's bytes!", None])
def test_a_changed_or_missing_shard_is_not_trusted(recorded, damage):
    out, *_ = recorded
    if damage is None:
        (out / SHARD).unlink()
    else:
        (out / SHARD).write_bytes(damage)
    assert resume.load_completed(str(out), SHARD, fingerprint(), "/tree") is None


@pytest.mark.parametrize(
    "record",
    [
        b"{not json",
        b"\xff\xfe",
        json.dumps({"fingerprint": fingerprint()}).encode(),  # no result
        "no prints",  # a record of a version that kept no prints: its shard is written again
        # An earlier version's record: the shard's fields were not nested under "shard".
        None,
    ],
)
def test_an_unreadable_or_foreign_record_counts_as_absent(recorded, record):
    out, *_ = recorded
    path = out / ".progress" / f"{SHARD}.json"
    if record is None:
        old = json.loads(path.read_text())
        shard = old["result"].pop("shard")
        old["result"].update(shard)
        record = json.dumps(old).encode()
    elif record == "no prints":
        old = json.loads(path.read_text())
        del old["prints"]
        record = json.dumps(old).encode()
    path.write_bytes(record)
    assert resume.load_completed(str(out), SHARD, fingerprint(), "/tree") is None
