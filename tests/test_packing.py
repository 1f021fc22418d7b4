"""Packed index batches: exact round trips, every element once, compressed, and the stage
boundaries of a build crossed packed."""

import random

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.core.entries import IndexEntry, LabelledEntry
from beam_pipeline.options import BuildConfig
from beam_pipeline.pipeline import build_pipeline, prepare
from beam_pipeline.stages import packing
from beam_pipeline.stages.coders import LabelledEntryCoder
from beam_pipeline.tools import sample_tree


def det_entries(count, seed=0):
    """LabelledEntry of an ILSVRC DET train tree: synset folders, 1-3 boxes each."""
    rng = random.Random(seed)
    entries = []
    for i in range(count):
        synset = f"n{rng.randrange(1440764, 1440764 + 200):08d}"
        key = f"train/ILSVRC2013_train/{synset}/{synset}_{i}"
        objects = tuple(
            AnnotatedObject(
                synset,
                Box(*sorted(rng.sample(range(500), 2)), *sorted(rng.sample(range(375), 2))),
                False,
                rng.random() < 0.3,
            )
            for _ in range(rng.randint(1, 3))
        )
        entry = IndexEntry(
            "train",
            key,
            f"Data/DET/{key}.JPEG",
            f"Annotations/DET/{key}.xml",
            synset,
            rng.randrange(20_000, 200_000),
        )
        labels = tuple(rng.randrange(200) for _ in objects)
        entries.append(
            LabelledEntry(entry, Annotation(500, 375, objects), labels[0], labels, "xml")
        )
    return entries


@pytest.mark.parametrize(
    "items",
    [[], [b""], [b"a", b"", b"\x00\xff" * 1000], [bytes([i % 256]) * i for i in range(300)]],
)
def test_unpack_gives_back_exactly_the_packed_items(items):
    assert packing.unpack(packing.pack(items)) == items


def test_a_value_is_compressed_only_from_min_compressed_bytes():
    small = b"Data/DET/train/n01/n01_1.JPEG" * 10
    large = small * 10
    assert len(small) < packing.MIN_COMPRESSED_BYTES <= len(large)
    assert packing.compress(small) == b"\x00" + small
    packed = packing.compress(large)
    assert packed[:1] == b"\x01" and len(packed) < len(large) / 10
    assert packing.decompress(packing.compress(small)) == small
    assert packing.decompress(packed) == large


def test_a_value_that_was_not_packed_is_refused():
    with pytest.raises(ValueError, match="not a packed value: it starts with b'x'"):
        packing.decompress(b"x\x9c...")


def test_index_entries_pack_to_under_a_third_of_their_encoded_size():
    # What the coordinator relays per entry: ~190 bytes encoded, ~60 packed (zlib level 1).
    coder = LabelledEntryCoder()
    encoded = [coder.encode(entry) for entry in det_entries(2000)]
    raw = sum(map(len, encoded))
    packed = packing.pack(encoded)
    assert len(packed) < raw / 3, (len(packed), raw)
    assert list(packing.unpack_elements(packed, coder)) == det_entries(2000)


@pytest.mark.parametrize("flush_bytes, values", [(None, 1), (1, 50)])
def test_pack_emits_every_element_once_in_a_few_values_per_bundle(flush_bytes, values, monkeypatch):
    # One bundle: one value; a bundle that fills FLUSH_BYTES after every element: one per element.
    if flush_bytes is not None:
        monkeypatch.setattr(packing, "FLUSH_BYTES", flush_bytes)
    entries = det_entries(50)
    coder = LabelledEntryCoder()
    with TestPipeline() as p:
        packed = p | beam.Create(entries) | packing.Pack(coder)
        assert_that(
            packed | beam.FlatMap(packing.unpack_elements, coder), equal_to(entries), "elements"
        )
        assert_that(packed | beam.combiners.Count.Globally(), equal_to([values]), label="values")


def test_the_entries_cross_to_the_stages_waiting_on_side_inputs_packed(tmp_path):
    # The index stages whose side inputs make a runner materialise their input (labelling waits
    # on the vocabulary, shard assignment on the plans) read packed bytes, not entries.
    tree = tmp_path / "tree"
    sample_tree.write_tree(str(tree), num_train=4, num_val=2, seed=0)
    config = BuildConfig.from_options(
        PipelineOptions(["--input_dir", str(tree), "--output_dir", str(tmp_path / "out")])
    )
    pipeline = beam.Pipeline()
    build_pipeline(pipeline, prepare(config))
    proto = pipeline.to_runner_api()
    components = proto.components
    readers = {
        transform.unique_name: transform
        for transform in components.transforms.values()
        if transform.unique_name in ("LabelImages/Label/ParDo(_LabelFn)", "AssignShards/KeyByShard")
    }
    assert len(readers) == 2
    for transform in readers.values():
        (main,) = [pcoll for tag, pcoll in transform.inputs.items() if "side_input" not in tag]
        coder = components.coders[components.pcollections[main].coder_id]
        assert coder.spec.urn == "beam:coder:bytes:v1", transform.unique_name
