"""Each composite transform on its own, with TestPipeline."""

import collections
import concurrent.futures
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from helpers import ilsvrc_image, jpeg_bytes, write

from beam_pipeline.core import sharding
from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box, voc_xml
from beam_pipeline.core.entries import IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.core.images import ImagePolicy
from beam_pipeline.core.labels import Vocabulary
from beam_pipeline.core.rejections import InputError, Rejection
from beam_pipeline.failures import BuildFailed
from beam_pipeline.output import directory
from beam_pipeline.stages import discovery, packing, writing
from beam_pipeline.stages.coders import LabelledEntryCoder
from beam_pipeline.stages.discovery import DiscoverImages
from beam_pipeline.stages.labelling import (
    BuildVocabulary,
    ClassifySplits,
    LabelImages,
    ParseAnnotations,
)
from beam_pipeline.stages.writing import AssignShards, WriteShards, rank_members
from beam_pipeline.tree import layouts, planner
from beam_pipeline.tree.fileio import read_ahead, read_file
from beam_pipeline.tree.folders import has_files, match
from beam_pipeline.tree.layouts import TreeAccess
from beam_pipeline.tree.listing import file_version

TARGET = sharding.DEFAULT_TARGET_SHARD_BYTES


def entry(key, split="train", annotation_filename=None, folder_class=None, filename=None):
    return IndexEntry(split, key, filename or key + ".JPEG", annotation_filename, folder_class, 100)


def list_parts(tasks):
    """The main output of every listing part of `tasks`, level by level, as DiscoverImages
    runs them (directory entries and rejections left out)."""
    parts = [(index, os.fsencode(task.directory)) for index, task in enumerate(tasks)]
    found = []
    for level in range(discovery.LISTED_LEVELS + 1):
        fn = discovery._ListPartFn(tasks, subtree=level == discovery.LISTED_LEVELS)
        outputs = [item for part in parts for item in fn.process(part)]
        found += [item for item in outputs if not isinstance(item, beam.pvalue.TaggedOutput)]
        parts = [
            item.value
            for item in outputs
            if isinstance(item, beam.pvalue.TaggedOutput) and item.tag == discovery.SUBDIRECTORIES
        ]
    return found


def test_listing_sends_each_pairing_group_as_batches_not_files(tmp_path):
    # 40 images in a flat directory and 20 in a subdirectory, half with XML: the listing sends
    # a few batches per directory (one per pairing group it found), and every file's group is
    # the one its key hashes to, so an image and its XML always meet.
    for i in range(40):
        ilsvrc_image(tmp_path, "train", f"img{i}", b"A", voc_xml() if i % 2 else None)
    for i in range(20):
        ilsvrc_image(tmp_path, "train", f"sub/img{i}", b"B", voc_xml() if i % 2 else None)
    plan = planner.plan_discovery(
        str(tmp_path), layouts.ILSVRC_DET, ("train",), TreeAccess(has_files, match, None)
    )
    batches = list_parts(plan.tasks)
    refs = collections.Counter()
    for group, (tag, data) in batches:
        for ref in discovery._FILE_REFS.decode(packing.decompress(data)):
            assert discovery.pairing_group(ref.key) == group
            refs[tag] += 1
    assert refs == {discovery.IMAGE_FILES: 60, discovery.ANNOTATION_FILES: 30}
    groups = {group for group, _ in batches}
    assert {directory for directory, _ in groups} == {"train", "train/sub"}
    assert len(batches) <= 2 * 2 * discovery.GROUPS_PER_DIRECTORY  # 2 kinds, 2 directories
    flat = {bucket for directory, bucket in groups if directory == "train"}
    assert len(flat) > discovery.GROUPS_PER_DIRECTORY // 2  # a flat directory is spread


def test_voc_memberships_join_the_group_of_their_image():
    memberships = [("VOC2007/000001", "train"), ("VOC2007/000001", "validation")]
    memberships += [("VOC2007/000002", "train")]
    grouped = discovery.grouped_memberships(memberships)
    decoded = {
        group: discovery._MEMBERSHIPS.decode(packing.decompress(data))
        for group, (tag, data) in grouped
        if tag == discovery.LISTED_SPLITS
    }
    assert sum(len(pairs) for pairs in decoded.values()) == 3
    for group, pairs in decoded.items():
        assert all(discovery.pairing_group(key) == group for key, _ in pairs)


def linked_tree(tmp_path, layout):
    """A DET train tree whose directory links make the listing's parts disagree with a single
    walk unless the directories entered twice are resolved across all of them."""
    train = tmp_path / "tree/Data/DET/train"
    for name in ("a/x/1", "a/x/2", "c/3", "d/e/4", "d/z/5", "m/deep/er/6", "top"):
        write(train / f"{name}.JPEG", jpeg_bytes(4, 4))
    write(tmp_path / "ext/E/7.JPEG", jpeg_bytes(4, 4))
    write(train / "a/x/notes.txt", "a stray file: a rejection wherever a walk lists it")
    write(tmp_path / "ext/E/notes.txt", "another")
    links = {
        "two": {"b": "a"},  # a second link to a directory of another part: refused
        "loop": {"a/x/up": "."},  # a loop to the top: refused, and nothing below it listed
        "sibling": {"d/e/early": "d/z"},  # reaches d/z first: refused, d/z listed by its path
        "deep": {"c/in": "m/deep", "m/deep/er/back": "c"},  # across levels, both ways
        "outside": {"a/ext": "EXT", "d/e/ext": "EXT"},  # one directory outside, two links
        "chain": {"b": "a", "b2": "b", "c/via": "b/x"},  # links to links
    }[layout]
    for link, target in links.items():
        path = train / link
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(
            tmp_path / "ext/E" if target == "EXT" else "." if target == "." else train / target,
            path,
        )
    return tmp_path / "tree"


@pytest.mark.parametrize("layout", ["two", "loop", "sibling", "deep", "outside", "chain"])
def test_listing_in_parts_finds_what_a_single_walk_finds(tmp_path, layout):
    root = linked_tree(tmp_path, layout)
    plan = planner.plan_discovery(
        str(root), layouts.ILSVRC_DET, ("train",), TreeAccess(has_files, match, None)
    )
    single = [item for task in plan.tasks for item in discovery.list_task(task)]
    expected_keys = sorted(kind_ref[1].key for kind_ref in single if isinstance(kind_ref, tuple))
    expected_rejected = sorted((r.path, r.reason) for r in single if isinstance(r, Rejection))
    assert "directory_visited_twice" in {reason for _, reason in expected_rejected}
    with TestPipeline() as p:
        entries, rejected = p | DiscoverImages(plan)
        assert_that(entries | beam.Map(lambda e: e.key), equal_to(expected_keys), label="keys")
        assert_that(
            rejected | beam.Map(lambda r: (r.path, r.reason)),
            equal_to(expected_rejected),
            label="rejected",
        )


def test_discover_images_pairs_files_and_reports_strays(tmp_path):
    ilsvrc_image(tmp_path, "train", "s/a", b"A", voc_xml([("cat", 1, 1, 5, 5)]))
    ilsvrc_image(tmp_path, "train", "s/b", b"B")
    write(tmp_path / "Annotations/DET/train/s/orphan.xml", voc_xml())
    write(tmp_path / "Data/DET/train/s/readme.txt", "hello")
    plan = planner.plan_discovery(
        str(tmp_path), layouts.ILSVRC_DET, ("train",), TreeAccess(has_files, match, None)
    )
    root = str(tmp_path)
    modified = {k: file_version((tmp_path / f"Data/DET/train/s/{k}.JPEG").stat()) for k in "ab"}
    with TestPipeline() as p:
        entries, rejected = p | DiscoverImages(plan)
        assert_that(
            entries,
            equal_to(
                [
                    IndexEntry(
                        "train",
                        "train/s/a",
                        "Data/DET/train/s/a.JPEG",
                        "Annotations/DET/train/s/a.xml",
                        None,
                        1,
                        modified["a"],
                    ),
                    IndexEntry(
                        "train",
                        "train/s/b",
                        "Data/DET/train/s/b.JPEG",
                        None,
                        None,
                        1,
                        modified["b"],
                    ),
                ]
            ),
            label="entries",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.path.replace(root, ""), r.reason, r.is_image)),
            equal_to(
                [
                    ("/Annotations/DET/train/s/orphan.xml", "annotation_without_image", False),
                    ("/Data/DET/train/s/readme.txt", "not_an_image_file", False),
                ]
            ),
            label="rejected",
        )


def test_parse_annotations_separates_good_and_malformed(tmp_path):
    write(tmp_path / "good.xml", voc_xml([("cat", 1, 2, 3, 4)], size=(10, 10)))
    bad = write(tmp_path / "bad.xml", "<annotation><object>")
    inputs = [
        entry("a", annotation_filename="good.xml"),
        entry("b", annotation_filename="bad.xml"),
        entry("c"),
    ]
    cat = AnnotatedObject("cat", Box(1, 2, 3, 4), difficult=False, truncated=False)
    with TestPipeline() as p:
        parsed, rejected = p | beam.Create(inputs) | ParseAnnotations(str(tmp_path))
        assert_that(
            parsed,
            equal_to(
                [ParsedEntry(inputs[0], Annotation(10, 10, (cat,))), ParsedEntry(inputs[2], None)]
            ),
            label="parsed",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.path, r.stage, r.reason)),
            equal_to([(str(bad), "annotation", "annotation_malformed")]),
            label="rejected",
        )


def annotated(*names):
    return Annotation(
        50,
        50,
        tuple(AnnotatedObject(n, Box(0, 0, 10 + i, 10), False, False) for i, n in enumerate(names)),
    )


def test_vocabulary_comes_from_train_objects_and_folders_only():
    inputs = [
        ParsedEntry(entry("a"), annotated("zebra", "cat")),
        ParsedEntry(entry("b", folder_class="n01"), None),
        ParsedEntry(entry("c", split="validation"), annotated("unicorn")),
    ]
    with TestPipeline() as p:
        vocabulary = p | beam.Create(inputs) | BuildVocabulary("train")
        assert_that(vocabulary, equal_to([Vocabulary(("cat", "n01", "zebra"))]))


def test_label_images_applies_the_rule_per_split_kind_and_rejects_what_it_cannot_label():
    parsed = [
        # train: annotated (DET-like); b has no XML, so it is a negative.
        ParsedEntry(entry("a", annotation_filename="a.xml"), annotated("cat", "dog")),
        ParsedEntry(entry("b"), None),
        # validation: class folders (CLS-LOC val after valprep.sh); "stray" lies outside them.
        ParsedEntry(entry("v1", split="validation", folder_class="dog"), None),
        ParsedEntry(
            entry("v2", split="validation", annotation_filename="v2.xml", folder_class="dog"),
            annotated("cat"),
        ),
        ParsedEntry(entry("stray", split="validation"), None),
        ParsedEntry(entry("c", split="validation", annotation_filename="c.xml"), annotated("eel")),
        # test: no annotations, no folders.
        ParsedEntry(entry("t", split="test"), None),
    ]
    with TestPipeline() as p:
        vocabulary = p | "V" >> beam.Create([Vocabulary(("cat", "dog"))])
        kinds = p | "E" >> beam.Create([pe.entry for pe in parsed]) | ClassifySplits()
        labelled, rejected = p | beam.Create(parsed) | LabelImages(vocabulary, kinds, "/r")
        assert_that(
            kinds,
            equal_to(
                [("train", "annotated"), ("validation", "class_folders"), ("test", "unlabelled")]
            ),
            label="kinds",
        )
        assert_that(
            labelled
            | beam.Map(
                lambda e: (e.entry.key, e.label, e.object_labels, e.source, e.folder_disagrees)
            ),
            equal_to(
                [
                    ("a", 1, (0, 1), "xml", False),
                    ("b", 2, (), "background", False),
                    ("v1", 1, (), "folder", False),
                    ("v2", 0, (0,), "xml", True),
                    ("t", -1, (), "unlabelled", False),
                ]
            ),
            label="labelled",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.split, r.path, r.stage, r.reason, r.is_image)),
            equal_to(
                [
                    ("validation", "/r/stray.JPEG", "label", "no_class", True),
                    ("validation", "/r/c.xml", "label", "unknown_class", True),
                    # Reported, not rejected: v2 is labelled by its XML, above.
                    ("validation", "/r/v2.JPEG", "label", "folder_disagreement", False),
                ]
            ),
            label="rejected",
        )


def check_assignment(ranked, keys_by_split):
    """Each shard holds a contiguous, balanced rank range, in the global sort-key order."""
    by_shard = {shard: members for shard, members in ranked}
    for split, keys in keys_by_split.items():
        ordered = sorted(keys, key=lambda key: (sharding.sort_key(0, split, key), key))
        shards = sorted(shard for shard in by_shard if shard[0] == split)
        assert shards == [(split, i) for i in range(len(shards))]
        sizes = [len(by_shard[shard]) for shard in shards]
        assert sum(sizes) == len(keys) and max(sizes) - min(sizes) <= 1
        flat = [member for shard in shards for member in by_shard[shard]]
        assert flat == list(enumerate(ordered))  # ranks 0..N-1, each key once, in order


@pytest.mark.parametrize(
    "bucket_bits, flush_bytes", [(sharding.BUCKET_BITS, None), (2, None), (2, 1)]
)
def test_assign_shards_gives_balanced_contiguous_rank_ranges(bucket_bits, flush_bytes, monkeypatch):
    # With 4 buckets of ~25 entries, most buckets straddle a boundary of the 7 shards: their
    # entries go to both shards, and each shard keeps its own ranks. The entries of a bundle
    # travel as one batch per shard, or as several when the bundle's batches fill FLUSH_BYTES.
    if flush_bytes is not None:
        monkeypatch.setattr(writing, "FLUSH_BYTES", flush_bytes)
    monkeypatch.setattr(sharding, "BUCKET_BITS", bucket_bits)
    monkeypatch.setattr(sharding, "NUM_BUCKETS", 1 << bucket_bits)
    inputs = [LabelledEntry(entry(f"k{i}"), None, 0, (), "folder") for i in range(100)]
    inputs += [
        LabelledEntry(entry(f"v{i}", split="validation"), None, 0, (), "folder") for i in range(3)
    ]
    with TestPipeline() as p:
        assigned, plans = (
            p | beam.Create(inputs) | AssignShards(0, {"train": 7, "validation": None}, 1 << 20)
        )
        ranked = (
            assigned
            | beam.GroupByKey()
            | beam.Map(
                lambda kv, plans: (
                    kv[0],
                    [(r, e.entry.key) for r, e in rank_members(kv[1], plans[kv[0][0]], kv[0][1])],
                ),
                plans=beam.pvalue.AsDict(plans),
            )
        )
        keys = {"train": [f"k{i}" for i in range(100)], "validation": ["v0", "v1", "v2"]}
        assert_that(
            ranked | beam.combiners.ToList(),
            lambda lists: check_assignment(lists[0], keys),
            label="assigned",
        )
        assert_that(
            plans | beam.Map(lambda kv: (kv[0], kv[1].num_examples, kv[1].num_shards)),
            equal_to([("train", 100, 7), ("validation", 3, 1)]),
            label="plans",
        )
        sent = assigned | "Sizes" >> beam.Map(lambda kv: len(writing.decode_members(kv[1])))
        if bucket_bits == 2:
            assert_that(  # the straddling buckets were sent to both sides
                sent | "Sent" >> beam.CombineGlobally(sum),
                lambda counts: counts[0] > 103 or pytest.fail(f"{counts} sent"),
                label="straddling",
            )
        # One bundle: one batch per shard; flushing after every entry: one entry per batch.
        assert_that(
            sent | "Batches" >> beam.combiners.ToList(),
            lambda sizes: (
                (len(sizes[0]) == 8 if flush_bytes is None else set(sizes[0]) == {1})
                or pytest.fail(f"batches of {sorted(sizes[0])}")
            ),
            label="batches",
        )


def test_a_shard_missing_an_entry_of_its_bucket_fails_the_build():
    members = [
        (
            sharding.sort_key(0, "train", f"k{i}"),
            LabelledEntryCoder().encode(LabelledEntry(entry(f"k{i}"), None, 0, (), "x")),
        )
        for i in range(4)
    ]
    counts = collections.Counter(sharding.bucket_of(key) for key, _ in members)
    plan = sharding.plan_split(counts, 0, 1, TARGET)

    def batches(*parts):
        return [writing.encode_members(part) for part in parts]

    assert [r for r, _ in rank_members(batches(members[:1], members[1:]), plan, 0)] == [0, 1, 2, 3]
    with pytest.raises(BuildFailed, match="shard 0 received 3 of its 4 entries; the runner lost"):
        rank_members(batches(members[1:]), plan, 0)
    with pytest.raises(BuildFailed, match="shard 0 received 2 entries of bucket"):
        rank_members(batches(members, members[:1]), plan, 0)


def test_a_worker_that_does_not_see_the_tree_or_the_output_fails_the_build(tmp_path):
    # A Dask worker with another folder at --input_dir listed nothing (the build blamed the
    # tree, or committed what the other workers listed); at --output_dir it wrote its shards
    # into its own view (a Dask trial). Here the tree and the output are gone from the path.
    ilsvrc_image(tmp_path / "tree", "train", "a", jpeg_bytes(), voc_xml([("cat", 1, 1, 5, 5)]))
    plan = planner.plan_discovery(
        str(tmp_path / "tree"), layouts.ILSVRC_DET, ("train",), TreeAccess(has_files, match, None)
    )
    os.rename(tmp_path / "tree", tmp_path / "moved")
    os.mkdir(tmp_path / "tree")  # (an empty folder at the path, as a mount over it shows)
    seen = r"does not see the tree at .*/tree: every worker must"
    with pytest.raises(Exception, match=seen), TestPipeline() as p:
        _ = p | DiscoverImages(plan)
    (tmp_path / "out").mkdir()  # (no mark: not the folder the build began in)
    seen = r"does not see the output directory .*/out \(its "
    with pytest.raises(Exception, match=seen), TestPipeline() as p:
        vocabulary = p | "V" >> beam.Create([Vocabulary(("cat",))])
        plans = p | "P" >> beam.Create([("train", None)])
        assigned = p | beam.Create([(("train", 0), writing.encode_members([]))])
        _ = assigned | WriteShards(
            str(tmp_path), str(tmp_path / "out"), ImagePolicy(), vocabulary, plans
        )


def test_write_shards_streams_records_and_rejects_bad_images(tmp_path):
    write(tmp_path / "in/good.JPEG", jpeg_bytes(40, 30))
    bad = write(tmp_path / "in/bad.JPEG", jpeg_bytes(40, 30)[:300])
    out = tmp_path / "out"
    out.mkdir()
    (out / directory.OWNER_FILE).write_text("")  # (a build's first file)
    labelled = [
        LabelledEntry(entry("good", filename="in/good.JPEG"), None, 1, (), "folder"),
        LabelledEntry(entry("bad", filename="in/bad.JPEG"), None, 1, (), "folder"),
    ]
    with TestPipeline() as p:
        vocabulary = p | "V" >> beam.Create([Vocabulary(("cat",))])
        keys = [sharding.sort_key(0, "train", item.entry.key) for item in labelled]
        plan = sharding.plan_split(collections.Counter(map(sharding.bucket_of, keys)), 0, 1, TARGET)
        plans = p | "P" >> beam.Create([("train", plan)])
        members = [
            (key, LabelledEntryCoder().encode(item))
            for key, item in zip(keys, labelled, strict=True)
        ]
        assigned = p | beam.Create([(("train", 0), writing.encode_members(members))])
        results, rejected, _ = assigned | WriteShards(
            str(tmp_path), str(out), ImagePolicy(), vocabulary, plans
        )
        assert_that(
            results | beam.Map(lambda r: (r.shard.file, r.shard.num_examples, r.class_counts)),
            equal_to([("train-00000-of-00001.tfrecord", 1, ((1, 1),))]),
            label="results",
        )
        assert_that(
            rejected | beam.Map(lambda r: (r.path, r.stage, r.reason)),
            equal_to([(str(bad), "image", "truncated_image")]),
            label="rejected",
        )
    assert sorted(f.name for f in out.iterdir()) == [
        ".imagenet-tfrecords",
        ".progress",
        ".tmp",
        "train-00000-of-00001.tfrecord",
    ]
    # No temp file is left; the writer's live count (what the progress bar read) is.
    assert [p.relative_to(out).as_posix() for p in (out / ".tmp").rglob("*")] == [
        ".tmp/live",
        ".tmp/live/written",
        ".tmp/live/written/train-00000-of-00001.tfrecord",
    ]
    # Both images were processed: one written, one rejected.
    assert (out / ".tmp/live/written/train-00000-of-00001.tfrecord").read_text() == "2"
    assert [f.name for f in (out / ".progress").iterdir()] == ["train-00000-of-00001.tfrecord.json"]


def test_rejections_sort_deterministically():
    a = Rejection("train", "/b", "image", "x", "d")
    b = Rejection("train", "/a", "image", "x", "d")
    assert sorted([a, b]) == [b, a]


class _CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A real thread pool that remembers how many reads were handed to it."""

    def __init__(self):
        super().__init__(4)
        self.submitted = 0

    def submit(self, *args, **kwargs):
        self.submitted += 1
        return super().submit(*args, **kwargs)


def test_a_pipe_or_folder_in_an_images_place_is_a_read_error_not_a_wait(tmp_path):
    # A trial swapped images for FIFOs after the listing: the build waited forever in open().
    pipe, folder = tmp_path / "swapped.JPEG", tmp_path / "folder.JPEG"
    os.mkfifo(pipe)
    folder.mkdir()
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        future = executor.submit(read_file, str(pipe), regular=True)
        try:
            with pytest.raises(InputError) as failure:
                future.result(timeout=10)
        finally:  # a read that waits on the pipe: give it a writer, so the pool can close
            if not future.done():
                with open(pipe, "wb"):
                    pass
    assert (failure.value.reason, failure.value.detail) == (
        "read_error",
        "not a regular file: a device, socket or pipe (there since the tree was listed?)",
    )
    with pytest.raises(InputError) as failure:
        read_file(str(folder), regular=True)
    assert failure.value.detail == f"IsADirectoryError: [Errno 21] Is a directory: '{folder}'"
    (tmp_path / "image.JPEG").write_bytes(b"\xff\xd8 bytes")
    assert read_file(str(tmp_path / "image.JPEG"), regular=True) == b"\xff\xd8 bytes"


def test_read_ahead_keeps_order_bounds_reads_in_flight_and_reports_each_failure(tmp_path):
    paths = []
    for i in range(10):
        path = tmp_path / f"{i}.bin"
        path.write_bytes(bytes([i]) * (i + 1))
        paths.append((str(path), i + 1))
    paths[4] = (str(tmp_path / "missing.bin"), 5)
    with _CountingExecutor() as executor:
        reads = read_ahead(paths, executor, max_files=3, max_bytes=1000)
        first = next(reads)
        assert executor.submitted == 3
        assert first.result() == b"\x00"
        futures = [first, *reads]
        assert executor.submitted == 10
    assert len(futures) == 10
    for i, future in enumerate(futures):
        if i == 4:
            with pytest.raises(InputError) as failure:
                future.result()
            assert failure.value.reason == "read_error"
            assert "missing.bin" in str(failure.value)
        else:
            assert future.result() == bytes([i]) * (i + 1)

    with _CountingExecutor() as executor:
        reads = read_ahead(paths, executor, max_files=8, max_bytes=6)
        next(reads)
        assert executor.submitted == 3  # 1 + 2 + 3 bytes reach the 6-byte bound
        reads.close()
