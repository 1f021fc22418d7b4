"""`assemble_info`, the pure core of Finalize: every way a build is refused, and what it commits."""

import pytest

from beam_pipeline.core.entries import ShardResult
from beam_pipeline.core.labels import Vocabulary
from beam_pipeline.core.rejections import DISCOVER, IMAGE, Rejection
from beam_pipeline.core.sharding import SplitPlan
from beam_pipeline.failures import BuildFailed
from beam_pipeline.stages.finalize import FinalizeSpec, assemble_info, check_index_budget
from schemas import SCHEMA_VERSION, ShardInfo

VOCAB = Vocabulary(("cat", "dog"))


def spec(splits=("train",), max_bad_fraction=0.5) -> FinalizeSpec:
    return FinalizeSpec(
        output_dir="/out",
        splits=splits,
        max_bad_fraction=max_bad_fraction,
        options={"seed": 0},
        source={"input_dir": "/tree"},
        versions={"python": "3"},
    )


def plan(num_examples, num_shards) -> SplitPlan:
    return SplitPlan(num_examples, num_shards, bucket_offsets=(0,))


def result(index, num_shards, num_examples, class_counts, split="train") -> ShardResult:
    name = f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"
    shard = ShardInfo(name, num_examples, 100 * num_examples, f"sha{index}")
    return ShardResult(split, index, num_shards, shard, tuple(class_counts))


def rejection(path, reason="truncated_image", stage=IMAGE, split="train", is_image=True):
    return Rejection(split, path, stage, reason, "detail", is_image=is_image)


def test_a_complete_build_is_described_exactly():
    results = [result(1, 2, 2, [(1, 2)]), result(0, 2, 3, [(0, 1), (2, 2)])]
    rejections = [
        rejection("/tree/bad.JPEG"),
        rejection("/tree/x.txt", "not_an_image_file", DISCOVER, is_image=False),
        rejection("/tree/unreadable.JPEG", "broken_symlink", DISCOVER),
    ]
    # 6 entries were paired; the broken symlink never became one but is an image all the same.
    info = assemble_info(spec(), VOCAB, {"train": plan(5, 2)}, {"train": 6}, results, rejections)

    split = info.splits["train"]
    assert (split.num_examples, split.num_discovered, split.num_rejected) == (5, 7, 2)
    assert split.class_counts == (1, 2, 2)  # cat, dog, background
    assert [s.file for s in split.shards] == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert split.shards[0] == ShardInfo("train-00000-of-00002.tfrecord", 3, 300, "sha0")
    assert info.failures == {"truncated_image": 1, "not_an_image_file": 1, "broken_symlink": 1}
    assert info.classes == ("cat", "dog") and info.schema_version == SCHEMA_VERSION
    assert (info.options, info.source, info.versions) == (
        {"seed": 0},
        {"input_dir": "/tree"},
        {"python": "3"},
    )


def test_a_duplicated_result_from_a_retried_bundle_counts_once():
    once = result(0, 1, 2, [(0, 2)])
    info = assemble_info(spec(), VOCAB, {"train": plan(2, 1)}, {"train": 2}, [once, once], [])
    assert info.splits["train"].num_examples == 2


def test_a_split_without_images_is_refused():
    with pytest.raises(BuildFailed, match="BUILD FAILED: split 'validation' has no images"):
        assemble_info(
            spec(("train", "validation")),
            VOCAB,
            {"train": plan(1, 1)},
            {"train": 1},
            [result(0, 1, 1, [(0, 1)])],
            [],
        )


def test_a_split_whose_images_were_all_rejected_is_refused():
    rejections = [rejection(f"/tree/{i}.JPEG") for i in range(3)]
    with pytest.raises(BuildFailed, match="split 'train': all 3 images were rejected"):
        assemble_info(spec(max_bad_fraction=1.0), VOCAB, {}, {"train": 3}, [], rejections)


@pytest.mark.parametrize(
    "indices, missing",
    [((0,), "shards \\[1\\] missing or duplicated \\(\\[0\\]\\)"), ((0, 0, 1), "\\[0, 0, 1\\]")],
)
def test_a_missing_or_extra_shard_is_refused(indices, missing):
    results = [result(i, 2, 1, [(0, 1)], split="train") for i in indices]
    if len(indices) == 3:  # two different results for shard 0
        results[1] = result(0, 2, 2, [(0, 2)])
    with pytest.raises(BuildFailed, match=missing):
        assemble_info(spec(), VOCAB, {"train": plan(2, 2)}, {"train": 2}, results, [])


def test_an_image_neither_written_nor_rejected_is_refused():
    with pytest.raises(
        BuildFailed,
        match="split 'train': 4 images discovered but 2 written and 1 rejected; 1 unaccounted for",
    ):
        assemble_info(
            spec(),
            VOCAB,
            {"train": plan(3, 1)},
            {"train": 4},
            [result(0, 1, 2, [(0, 2)])],
            [rejection("/tree/bad.JPEG")],
        )


def test_more_rejections_than_the_budget_fail_the_build_and_name_the_dead_letter_file():
    rejections = [rejection("/tree/a.JPEG"), rejection("/tree/b.JPEG", "corrupt_image")]
    with pytest.raises(BuildFailed) as caught:
        assemble_info(
            spec(max_bad_fraction=0.25),
            VOCAB,
            {"train": plan(3, 1)},
            {"train": 5},
            [result(0, 1, 3, [(0, 3)])],
            rejections,
        )
    assert str(caught.value) == (
        "BUILD FAILED: 2 of 5 images rejected (40.00%), more than --max_bad_fraction=0.25; "
        "reasons {'corrupt_image': 1, 'truncated_image': 1}; see /out/rejected.jsonl; to "
        "commit the build without them, rerun with --max_bad_fraction 0.4 --resume (it keeps "
        "the shards written)"
    )


def test_files_that_are_not_images_do_not_count_against_the_budget():
    rejections = [
        rejection(f"/tree/{i}.xml", "annotation_without_image", DISCOVER, is_image=False)
        for i in range(10)
    ]
    info = assemble_info(
        spec(max_bad_fraction=0.0),
        VOCAB,
        {"train": plan(1, 1)},
        {"train": 1},
        [result(0, 1, 1, [(2, 1)])],
        rejections,
    )
    assert info.splits["train"].num_rejected == 0
    assert info.failures == {"annotation_without_image": 10}


def test_label_sources_and_folder_disagreements_are_summed_over_shards():
    results = [
        ShardResult(
            "train", 0, 2, ShardInfo("a", 3, 1, "x"), ((0, 3),), (("folder", 2), ("xml", 1)), 1
        ),
        ShardResult("train", 1, 2, ShardInfo("b", 2, 1, "y"), ((1, 2),), (("folder", 2),), 0),
    ]
    info = assemble_info(spec(), VOCAB, {"train": plan(5, 2)}, {"train": 5}, results, [])
    split = info.splits["train"]
    assert split.label_sources == {"folder": 4, "xml": 1}
    assert split.folder_disagreements == 1 and split.labelled


def test_a_split_of_unlabelled_examples_is_marked_unlabelled():
    results = [ShardResult("test", 0, 1, ShardInfo("t", 2, 1, "x"), (), (("unlabelled", 2),), 0)]
    info = assemble_info(spec(("test",)), VOCAB, {"test": plan(2, 1)}, {"test": 2}, results, [])
    assert not info.splits["test"].labelled
    assert info.splits["test"].class_counts == (0, 0, 0)


def unknown(name, n):
    detail = f"class {name!r} is not in the vocabulary of 2"
    return [
        Rejection("train", f"/tree/{name}{i}.xml", "label", "unknown_class", detail)
        for i in range(n)
    ]


def test_the_index_budget_names_the_missing_classes_most_frequent_first():
    rejections = [
        *unknown("eel", 3),
        *unknown("o'clock", 5),
        rejection("/t/x", "broken_symlink", DISCOVER),
    ]
    labels_file = FinalizeSpec(
        **{**spec(max_bad_fraction=0.1).__dict__, "vocabulary_source": "--labels_file /l.txt"}
    )
    with pytest.raises(BuildFailed) as caught:
        check_index_budget(labels_file, {"train": 20}, rejections)
    assert str(caught.value) == (
        "BUILD FAILED: 9 of 21 images rejected before any image was read (42.86%), more than "
        "--max_bad_fraction=0.1; reasons {'unknown_class': 8, 'broken_symlink': 1}; classes "
        "outside the vocabulary (--labels_file /l.txt), most frequent first: "
        "{\"o'clock\": 5, 'eel': 3}; see /out/rejected.jsonl"
    )


def test_the_index_budget_names_the_budget_that_builds_without_them():
    # Without a class outside the vocabulary to fix, the next command is the budget that
    # holds: the smallest of two decimals whose share the check itself accepts.
    rejections = [rejection(f"/t/{i}", "broken_symlink", DISCOVER) for i in range(29)]
    with pytest.raises(BuildFailed) as caught:
        check_index_budget(spec(max_bad_fraction=0.1), {"train": 71}, rejections)
    assert str(caught.value) == (
        "BUILD FAILED: 29 of 100 images rejected before any image was read (29.00%), more than "
        "--max_bad_fraction=0.1; reasons {'broken_symlink': 29}; see /out/rejected.jsonl; to "
        "build without them, rerun with --max_bad_fraction 0.3"
    )  # 0.29 * 100 is 28.999999999999996 in floating point: 0.29 would fail again


def test_the_budget_says_to_make_files_it_could_not_read_readable():
    # An XML of mode 000 failed the index's budget, which named the budget that left its image
    # out; that build failed again on the images of mode 000, found as they were read.
    denied = Rejection(
        "train", "/t/b.xml", DISCOVER, "read_error", "PermissionError: [Errno 13] Permission denied"
    )
    with pytest.raises(BuildFailed) as caught:
        check_index_budget(spec(max_bad_fraction=0.01), {"train": 79}, [denied])
    assert str(caught.value) == (
        "BUILD FAILED: 1 of 80 images rejected before any image was read (1.25%), more than "
        "--max_bad_fraction=0.01; reasons {'read_error': 1} (1 of them permission denied: make "
        "them readable to keep them, e.g. chmod -R a+rX /t/b.xml); see /out/rejected.jsonl; to "
        "build without them, rerun with --max_bad_fraction 0.02"
    )


def test_an_unread_directory_or_xml_fails_the_build_whatever_the_budget():
    # What they hide decides labels: a directory's images or XML, an XML file's objects.
    unread = [
        rejection("/t/Annotations/b.XML", "broken_symlink", DISCOVER, is_image=False),
        rejection("/t/Data/extra", "unreadable_directory", DISCOVER, is_image=False),
    ]
    for ordered in (unread, unread[::-1]):
        with pytest.raises(BuildFailed) as caught:
            check_index_budget(spec(max_bad_fraction=1.0), {"train": 20}, ordered)
        assert str(caught.value) == (
            "BUILD FAILED: the tree holds what the build cannot read: /t/Annotations/b.XML "
            "(broken_symlink: detail); /t/Data/extra (unreadable_directory: detail); the images "
            "inside, or those whose XML it is, would be missing or labelled background. Make "
            "them readable (e.g. chmod -R a+rX /t/Annotations/b.XML) or move them out of the tree"
        )
    # An unread image is one rejected image, within the budget; a stray file is reported only.
    check_index_budget(
        spec(max_bad_fraction=0.1),
        {"train": 20},
        [
            rejection("/t/Data/a.JPEG", "broken_symlink", DISCOVER),
            rejection("/t/Data/notes.txt", "unreadable_file", DISCOVER, is_image=False),
        ],
    )


def test_the_index_budget_says_why_a_class_with_a_space_is_outside_a_labels_file():
    # A build's labels.txt passed back: `golden retriever` was read as class `golden`.
    labels_file = FinalizeSpec(
        **{**spec(max_bad_fraction=0.1).__dict__, "vocabulary_source": "--labels_file /l.txt"}
    )
    with pytest.raises(BuildFailed) as caught:
        check_index_budget(labels_file, {"train": 20}, unknown("golden retriever", 3))
    assert str(caught.value).endswith(
        "most frequent first: {'golden retriever': 3} ('golden retriever' holds a space, and a "
        "labels file's class is a line's first word: such a class cannot be listed there; "
        "rename it); see /out/rejected.jsonl"
    )


def test_the_index_budget_message_does_not_depend_on_the_order_workers_ran_in():
    rejections = [
        *unknown("owl", 1),
        *unknown("eel", 1),
        rejection("/t/x", "annotation_malformed", DISCOVER),
    ]
    messages = set()
    for ordered in (rejections, rejections[::-1]):
        with pytest.raises(BuildFailed) as caught:
            check_index_budget(spec(max_bad_fraction=0.1), {"train": 4}, ordered)
        messages.add(str(caught.value))
    (message,) = messages
    assert "reasons {'unknown_class': 2, 'annotation_malformed': 1}" in message
    assert "most frequent first: {'eel': 1, 'owl': 1}" in message


def test_the_index_budget_passes_within_the_budget_and_ignores_non_images():
    strays = [rejection("/t/x.txt", "not_an_image_file", DISCOVER, is_image=False)] * 50
    check_index_budget(spec(max_bad_fraction=0.1), {"train": 20}, [*unknown("eel", 2), *strays])
    check_index_budget(spec(max_bad_fraction=0.0), {"train": 1}, [])
    # A split with no image fails here, before any shard is written, as Finalize would after.
    with pytest.raises(BuildFailed, match="BUILD FAILED: split 'train' has no images"):
        check_index_budget(spec(max_bad_fraction=0.0), {"train": 0}, [])
