"""`plan` (the build's index, without pixels or writes) and `stats` (a build's numbers), and the
command line that holds them."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from helpers import (
    build,
    dead_letters,
    failure_line,
    ilsvrc_image,
    jpeg_bytes,
    png_bytes,
    read_split,
    write,
)

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.failures import BuildFailed
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import commands, sample_tree, stats
from beam_pipeline.tools import plan as plan_tool
from loaders import load_dataset
from schemas import BUILD_INFO_FILE, DatasetInfo


def plan_agrees(plan: dict, name: str, split) -> dict:
    """Asserts that `plan --json`'s split `name` counts what the build's split wrote; returns it."""
    planned = plan["splits"][name]
    assert planned["images"] == split.num_discovered
    assert planned["examples"] == split.num_examples
    assert planned["shards"] == split.num_shards
    assert planned["label_sources"] == split.label_sources
    assert list(planned["class_counts"].values()) == list(split.class_counts)
    return planned


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The bundled sample's generator, small: (tree, its build, the build's DatasetInfo)."""
    tree = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(tree), num_train=120, num_val=40, seed=3)
    out = tmp_path_factory.mktemp("out") / "build"
    info = build(tree, out, "--num_shards", "train=3,val=2")
    return tree, out, info


def files_below(root):
    return sorted(
        (os.path.join(d, f), os.path.getsize(os.path.join(d, f)))
        for d, _, names in os.walk(root)
        for f in names
    )


def run_plan(capsys, *argv):
    code = commands.main(["plan", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_plan_of_the_sample_is_what_its_build_did(sample, capsys):
    tree, _, info = sample
    before = files_below(tree)
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--num_shards", "train=3,val=2", "--json")
    assert code == 0
    plan = json.loads(text)
    assert plan["would_build"] is True and plan["refusal"] is None
    assert plan["num_classes"] == info.num_classes and plan["layout"] == "ilsvrc_det"
    for name, split in info.splits.items():
        planned = plan_agrees(plan, name, split)
        assert list(planned["class_counts"]) == list(info.class_list.names)
        written = sorted(shard.num_examples for shard in split.shards)
        assert planned["examples_per_shard"] == [written[0], written[-1]]
        # The record estimate samples 64 records' overhead: within 1% of the real bytes.
        real = sum(shard.num_bytes for shard in split.shards)
        assert abs(planned["estimated_bytes"] - real) < 0.01 * real
    assert files_below(tree) == before  # nothing written, not even in the tree


def test_plan_shards_by_target_shard_mb_as_the_build_does(sample, capsys, tmp_path):
    # `plan` planned with the default 128 MiB whatever --target_shard_mb said: 1 shard of
    # each split where the build wrote 8 and 2 (6 of at most 0.2 MiB, rounded up to 8).
    tree = sample[0]
    info = build(tree, tmp_path / "out", "--target_shard_mb", "0.2")
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--target_shard_mb", "0.2", "--json")
    assert code == 0
    planned = {name: split["shards"] for name, split in json.loads(text)["splits"].items()}
    assert planned == {name: split.num_shards for name, split in info.splits.items()}
    assert sorted(planned.values()) == [2, 8]


def test_plan_text_of_the_sample(sample, capsys):
    tree, _, info = sample
    code, text, _ = run_plan(capsys, "--input_dir", tree)
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith(f"Plan for {tree} (ilsvrc_det): ")
    assert "no pixels read, nothing written" in lines[0]
    assert lines[1] == "classes: 4 (from the classes seen in the train split), plus background"
    train = info.splits["train"]
    counts = dict(zip(info.class_list.names, train.class_counts, strict=True))
    most = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    assert f"  most frequent: {', '.join(f'{n} {c}' for n, c in most)}" in lines
    assert lines[-1] == "The build would go ahead."


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory):
    """8 good train images (cat, dog), an XML without image, an unknown class, a broken XML,
    a stray file, and 3 val images of which one names a class the labels file lacks."""
    root = tmp_path_factory.mktemp("bad")
    for n in range(8):
        name = ("cat", "dog")[n % 2]
        xml = voc_xml([(name, 2, 2, 40 + n, 30)], size=(64, 48))
        ilsvrc_image(root, "train", f"good_{n}", jpeg_bytes(), xml)
    write(root / "Annotations/DET/train/orphan.xml", voc_xml([("cat", 1, 1, 9, 9)]))
    ilsvrc_image(root, "train", "bird", jpeg_bytes(), voc_xml([("bird", 1, 1, 20, 20)]))
    ilsvrc_image(root, "train", "broken", jpeg_bytes(), "<annotation><object>")
    write(root / "Data/DET/train/notes.txt", "not an image")
    for n in range(3):
        name = ("cat", "dog", "fox")[n]
        ilsvrc_image(root, "val", f"v{n}", jpeg_bytes(), voc_xml([(name, 1, 1, 30, 30)]))
    labels = write(root.parent / f"{root.name}-labels.txt", "cat\ndog\nbird\n")
    return root, labels


def test_plan_of_a_bad_tree_counts_orphans_unknown_classes_and_rejections(bad_tree, capsys):
    root, labels = bad_tree
    argv = ["--input_dir", root, "--labels_file", labels, "--max_bad_fraction", "0.2", "--json"]
    code, text, _ = run_plan(capsys, *argv)
    assert code == 0
    plan = json.loads(text)
    train, val = plan["splits"]["train"], plan["splits"]["validation"]
    assert (train["images"], train["annotated"], train["examples"]) == (10, 10, 9)
    assert train["orphans"] == {"annotation_without_image": 1}
    assert train["rejected"] == {"annotation_malformed": 1}  # images: 10 - 1 = 9 examples
    assert train["reported"] == {"annotation_without_image": 1, "not_an_image_file": 1}
    assert train["class_counts"] == {"cat": 4, "dog": 4, "bird": 1, "background": 0}
    assert (val["images"], val["examples"]) == (3, 2)
    assert val["unknown_classes"] == {"fox": 1} and val["rejected"] == {"unknown_class": 1}
    reasons = sorted(
        (r["split"], r["reason"], os.path.basename(r["path"])) for r in plan["rejections"]
    )
    assert reasons == [
        ("train", "annotation_malformed", "broken.xml"),
        ("train", "annotation_without_image", "orphan.xml"),
        ("train", "not_an_image_file", "notes.txt"),
        ("validation", "unknown_class", "v2.xml"),
    ]
    # The text's list holds the reported files too (notes.txt): "rejections" said otherwise.
    code, text, _ = run_plan(capsys, *argv[:-1])
    assert "\nfiles rejected or reported (4; --json lists them all):\n" in text


def test_plan_exits_1_with_the_builds_own_reason_when_the_build_would_be_refused(
    bad_tree, capsys, tmp_path
):
    root, labels = bad_tree
    argv = ["--input_dir", root, "--labels_file", labels]  # default budget: 1%
    code, text, _ = run_plan(capsys, *argv)
    assert code == 1
    refusal = text.splitlines()[-1]
    assert refusal.startswith(
        "The build would be refused: 2 of 13 images rejected before any image was read "
        "(15.38%), more than --max_bad_fraction=0.01; reasons "
    )
    assert "classes outside the vocabulary (--labels_file" in refusal and "{'fox': 1}" in refusal
    # The build itself stops for the same reason.
    with pytest.raises(Exception, match=r"2 of 13 images rejected before any image was read"):
        build(root, tmp_path / "out", "--labels_file", labels)


def test_plan_gives_the_budget_refusal_before_an_emptied_split_as_the_build_does(tmp_path, capsys):
    # Every train image names a class outside --labels_file: the build stops at its index
    # check, before the end where an empty split would be named; plan said the latter.
    tree = tmp_path / "in"
    for stem in ("a", "b"):
        ilsvrc_image(tree, "train", stem, jpeg_bytes(), voc_xml([("eel", 1, 1, 9, 9)]))
    labels = write(tmp_path / "labels.txt", "n01440764\n")
    argv = ["--input_dir", tree, "--splits", "train", "--labels_file", labels]
    code, text, _ = run_plan(capsys, *argv)
    assert code == 1
    assert text.splitlines()[-1].startswith(
        "The build would be refused: 2 of 2 images rejected before any image was read"
    )
    with pytest.raises(Exception, match="2 of 2 images rejected before any image was read"):
        build(tree, tmp_path / "out", "--splits", "train", "--labels_file", labels)


def hold_lock(directory) -> subprocess.Popen:
    """Another process holding `directory`'s build lock (as a running build does)."""
    script = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_plan_refuses_what_the_build_refuses_before_it_starts(sample, capsys, tmp_path):
    tree, out, _ = sample
    # A Dataflow job's flag without its runner, as the build refuses it; a negative count.
    code, _, err = run_plan(capsys, "--input_dir", tree, "--project", "p")
    assert code == 2 and err.startswith("error: --project names a Dataflow job, and this ")
    with pytest.raises(SystemExit):
        run_plan(capsys, "--input_dir", tree, "--rejections", "-1")
    assert "error: argument --rejections: -1: give 0 or more" in capsys.readouterr().err
    # A log in the tree, a blank output: "The build would go ahead", exit 0 (a CLI fuzz trial).
    code, _, err = run_plan(capsys, "--input_dir", tree, "--log_file", f"{tree}/x.log")
    assert (code, err) == (
        2,
        f"error: --log_file {tree}/x.log: it is inside the tree ({tree}): write the log "
        "outside it\n",
    )
    code, _, err = run_plan(capsys, "--input_dir", tree, "--output_dir", "")
    assert (code, err) == (2, "error: --output_dir '' is blank: name a folder\n")
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--output_dir", out)
    assert code == 1
    assert text.splitlines()[-1] == (
        f"The build would be refused: {out} already holds a complete build; pass --overwrite "
        "to replace it"
    )
    # With --overwrite: the room the rebuild's staged shards need beside the build it keeps.
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--output_dir", out, "--overwrite")
    assert code == 0
    note, go = text.splitlines()[-2:]
    assert go == "The build would go ahead."
    assert re.fullmatch(
        f"Note: {re.escape(str(out))} holds a complete build, kept until the rebuild commits: "
        r"the new shards, about [\d.]+ [KM]iB, wait beside it in \.staged/ "
        r"\([\d.]+ [KMGT]iB free\)",
        note,
    ), note
    # Beside a rebuild that stopped: what this one would do with the shards it staged.
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    write(copy / ".staged/train-00000-of-00003.tfrecord", "a stopped rebuild's shard")
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--output_dir", copy, "--overwrite")
    assert code == 0
    assert text.splitlines()[-3] == (
        f"Note: {copy}/.staged holds 1 shard a rebuild that stopped wrote; this build deletes "
        "it, --resume with --overwrite keeps what it would write again"
    )
    code, text, _ = run_plan(
        capsys, "--input_dir", tree, "--output_dir", copy, "--overwrite", "--resume"
    )
    assert code == 0 and "a rebuild that stopped wrote" not in text
    # A rebuild under way (its lock held): not called stopped (deleting .staged/ on that
    # advice failed it); verify says so too.
    holder = hold_lock(copy)
    try:
        code, text, _ = run_plan(capsys, "--input_dir", tree, "--output_dir", copy, "--overwrite")
        assert code == 1 and "a rebuild that stopped wrote" not in text
        assert text.splitlines()[-1].startswith("The build would be refused: another build is")
        from beam_pipeline.tools import verify

        assert verify.main([str(copy), "--no_decode"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"note: {copy}/.staged holds 1 shard (25 B) of a rebuild under way (a build holds "
            "the directory's lock)"
        )
    finally:
        holder.kill()
    # Resized: the new shards' size is not known before the images are.
    resized = ("--image_policy", "shorter_side", "--image_size", "64")
    code, text, _ = run_plan(
        capsys, "--input_dir", tree, "--output_dir", out, "--overwrite", *resized
    )
    assert code == 0
    assert re.fullmatch(
        f"Note: {re.escape(str(out))} holds a complete build, kept until the rebuild commits: "
        r"the new shards, their size unknown until resized \(the build there takes [\d.]+ "
        r"[KM]iB\), wait beside it in \.staged/ \([\d.]+ [KMGT]iB free\)",
        text.splitlines()[-2],
    ), text.splitlines()[-2]
    code, _, err = run_plan(capsys, "--input_dir", tree, "--num_shardz", "2")
    assert code == 2 and err.startswith("error: unknown flag --num_shardz (did you mean")
    # plan's own flags are suggested too.
    code, _, err = run_plan(capsys, "--input_dir", tree, "--rejection", "5")
    assert code == 2
    assert err.startswith("error: unknown flag --rejection (did you mean --rejections?)")
    # The runner's checks too: plan said "The build would go ahead" where nothing answered.
    dask = ["--runner", "DaskRunner", "--dask_client_address", "tcp://127.0.0.1:1"]
    for command in (["plan"], ["build"]):
        argv = [*command, "--input_dir", str(tree), "--output_dir", str(tmp_path / "d"), *dask]
        assert commands.main(argv) == 2
        assert capsys.readouterr().err.startswith(
            "error: cannot reach the Dask scheduler at tcp://127.0.0.1:1"
        )
    code, _, err = run_plan(capsys, "--input_dir", tree, "--runner", "DataflowRunner")
    assert code == 2 and err.startswith(f"error: --runner DataflowRunner: --input_dir {tree} is")
    code, _, err = run_plan(capsys, "--input_dir", tree, "--runner", "DirectRunnr")
    assert code == 2 and err.startswith("error: unknown --runner DirectRunnr (did you mean Dir")
    code, _, err = run_plan(capsys, "--input_dir", tmp_path / "nowhere")
    assert code == 2 and "does not exist or holds no files" in err
    assert not (tmp_path / "nowhere").exists()
    # An output below a file cannot be created: plan says so without writing anything.
    blocker = write(tmp_path / "blocker", "a file")
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--output_dir", blocker / "out")
    assert code == 1
    assert text.splitlines()[-1] == (
        f"The build would be refused: cannot write to {blocker}/out: {blocker} is a file, not a "
        "directory"
    )
    # An output inside the input tree is refused by both, before anything is written.
    inside = tree / "Data" / "DET" / "out"
    for command in (["plan"], ["build"]):
        argv = [*command, "--input_dir", str(tree), "--output_dir", str(inside)]
        assert commands.main(argv) == 2
        assert capsys.readouterr().err == (
            f"error: --output_dir {inside} lies inside the input tree {tree}'s image or "
            "annotation folders: the next build would list its files as input; choose a "
            "directory outside them\n"
        )
    assert not inside.exists()
    # Beside those folders (ROOT/out), nothing is listed: allowed.
    code, text, _ = run_plan(capsys, "--input_dir", tree, "--output_dir", tree / "out")
    assert code == 0 and text.splitlines()[-1] == "The build would go ahead."


def test_stats_are_the_builds_recorded_numbers(sample, capsys):
    _, out, info = sample
    assert commands.main(["stats", str(out), "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    for name, split in info.splits.items():
        records = read_split(out, name)
        got = numbers["splits"][name]
        assert got["examples"] == len(records) and got["shards"] == split.num_shards
        widths = sorted(r["image/width"][0] for r in records)
        assert got["image_width"]["min"] == widths[0] and got["image_width"]["max"] == widths[-1]
        objects = {}
        for record in records:
            n = len(record["image/object/class/label"])
            objects[str(n)] = objects.get(str(n), 0) + 1
        assert got["objects_per_image"] == dict(sorted(objects.items(), key=lambda kv: int(kv[0])))
        real = split.class_counts[: info.num_classes]
        assert (got["classes"]["min"], got["classes"]["max"]) == (min(real), max(real))
        assert got["classes"]["imbalance"] == pytest.approx(max(real) / min(real))
        assert got["rejections"] == {}
    assert "display_names" not in numbers  # a build without them: as before


def test_stats_text_names_rejections_and_says_what_an_old_build_lacks(bad_tree, tmp_path, capsys):
    root, labels = bad_tree
    out = tmp_path / "out"
    build(root, out, "--labels_file", labels, "--max_bad_fraction", "0.3")
    text = stats.format_stats(stats.build_stats(str(out)))
    assert "  rejections: unknown_class 1" in text.split("validation:")[1]
    train = text.split("validation:")[0]
    # (a header's "N rejected" counts images: the files only reported are apart)
    assert "  rejections: annotation_malformed 1\n" in train
    assert "  reported (not rejected): annotation_without_image 1, not_an_image_file 1" in train
    assert "examples per class: min 1, median 4, max 4; imbalance (max/min) 4.00" in train
    # A build from before schema 1.2 recorded no sizes or objects: stats says so.
    path = out / BUILD_INFO_FILE
    old = json.loads(path.read_text())
    old["schema_version"] = "1.1.0"
    for split in old["splits"].values():
        for key in ("objects_per_image", "image_widths", "image_heights"):
            del split[key]
    path.write_text(json.dumps(old))
    text = stats.format_stats(stats.build_stats(str(out)))
    assert "  image width: not recorded (built before schema 1.2; rebuild to record it)" in text
    assert DatasetInfo.from_json(path.read_text()).splits["train"].image_widths == {}
    # A rejected.jsonl emptied or a line written twice: stats printed "1 rejected" above
    # "rejections: none" (or two) without a word.
    lines = (out / "rejected.jsonl").read_text().splitlines(keepends=True)
    image = next(line for line in lines if '"unknown_class"' in line)
    (out / "rejected.jsonl").write_text("".join([*lines, image]))
    text = stats.format_stats(stats.build_stats(str(out)))
    assert (
        "  (rejected.jsonl names 2 rejected images of the split, build_info.json counts 1: the "
        f"build is damaged; run python -m beam_pipeline verify {out})"
    ) in text.split("validation:")[1]
    assert "rejected.jsonl names" not in text.split("validation:")[0]
    # Without rejected.jsonl, the reasons are unknown: one line naming it (was a traceback).
    (out / "rejected.jsonl").unlink()
    capsys.readouterr()
    assert commands.main(["stats", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {out}/rejected.jsonl cannot be read (")
    # A damaged build_info.json is named, for stats, verify, the loader and a new build: cut
    # short, or bytes that are not text (a PNG written over it: was a bare codec error).
    cut, png = path.read_bytes()[:300], b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    for damage, why in ((cut, "not JSON"), (png, "not UTF-8 text")):
        path.write_bytes(damage)
        damaged = f"{path} is damaged and the build cannot be read ({why}: "
        assert commands.main(["stats", str(out)]) == 2
        assert capsys.readouterr().err.startswith(f"error: {damaged}")
        assert commands.main(["verify", str(out)]) == 1
        assert capsys.readouterr().out.startswith(f"FAIL {damaged}")
        with pytest.raises(ValueError, match=re.escape(damaged)):
            load_dataset(str(out), "train", batch_size=2)
        assert build_tool.main(["--input_dir", str(root), "--output_dir", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"error: {out} already holds a build whose build_info.json is damaged; pass "
            "--overwrite to replace it\n"
        )


@pytest.mark.parametrize("command", ["stats", "verify", "upgrade", "show"])
def test_a_url_beam_cannot_reach_is_one_line_not_a_traceback(command, tmp_path, capsys):
    png = ["-o", str(tmp_path / "x.png")] if command == "show" else []
    assert commands.main([command, "s3://bucket/out", *png]) == 2
    captured = capsys.readouterr()
    # (the cause is Beam's: "Must provide one of client or options", "Missing boto3 ...")
    said = "error: s3://bucket/out cannot be read: "
    assert captured.err.startswith(said) and "Traceback" not in captured.err


def test_stats_of_a_directory_without_a_build(tmp_path, capsys):
    assert commands.main(["stats", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path} holds no committed build")
    # An input tree, given where its build belongs: said so (the message suggested building
    # into it), by the commands and by the loader.
    write(tmp_path / "Data/DET/train/a.JPEG", jpeg_bytes())
    tree = (
        f"{tmp_path} is an input tree (it holds Data/), not a build: build it first (python -m "
        f"beam_pipeline --input_dir {tmp_path} --output_dir OUT) and read OUT"
    )
    assert commands.main(["stats", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {tree}\n"
    with pytest.raises(FileNotFoundError) as error:  # IncompleteDatasetError
        load_dataset(str(tmp_path), "train", batch_size=2)
    assert str(error.value) == tree


def test_a_folder_of_class_folders_given_as_a_build_is_named_the_tree_to_build(tmp_path, capsys):
    # Keras's habit: the photo folder given to the loader. It was told to build *into* it
    # ("this is the output directory, not the tree"), which the build refuses.
    photos = tmp_path / "photos" / "train"
    for name in ("cat/a.JPG", "dog/b.png", "emu/c.jpeg", "yak/d.jpg", "notes/readme.txt"):
        write(photos / name, b"x")
    tree = (
        f"{photos} is a folder of image folders (cat/, dog/, emu/, ...), not a build: build it "
        f"first (python -m beam_pipeline --input_dir {photos} --output_dir OUT) and read OUT"
    )
    with pytest.raises(FileNotFoundError) as error:  # IncompleteDatasetError
        load_dataset(str(photos), "train", batch_size=2)
    assert str(error.value) == tree
    assert commands.main(["stats", str(photos)]) == 2
    assert capsys.readouterr().err == f"error: {tree}\n"
    assert commands.main(["stats", str(photos / "notes")]) == 2  # no image folders: as before
    assert "holds no committed build" in capsys.readouterr().err


def test_the_command_line_lists_its_commands_and_refuses_unknown_ones(capsys):
    assert commands.main([]) == 0
    listing = capsys.readouterr().out
    for name in ("build", "plan", "show", "inspect", "stats", "verify"):
        assert f"\n  {name} " in listing
    assert commands.main(["plna", "--input_dir", "x"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown command 'plna' (did you mean plan?)")
    # --version was "unknown flag --version (did you mean --spark_version?)" (a new user's trial).
    from importlib import metadata

    import beam_pipeline

    for flag in ("--version", "-V"):
        assert commands.main([flag]) == 0
        said = capsys.readouterr().out
        assert said.startswith(f"imagenet-tfrecords {beam_pipeline.__version__} (apache-beam ")
        assert f"tensorflow {metadata.version('tensorflow')}, Python 3." in said


def test_plan_leaves_a_background_without_images_out_of_the_least_frequent(tmp_path, capsys):
    # CLS-LOC has no background image: "least frequent: background 0, ..." was no news.
    root = tmp_path / "tree"
    for stem in ("n01/a", "n01/b", "n02/c"):
        ilsvrc_image(root, "train", stem, jpeg_bytes(), task="CLS-LOC")
    assert plan_tool.main(["--input_dir", str(root), "--splits", "train"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  least frequent: n02 1, n01 2" in lines
    assert "  classes present: 2 of 2" in lines  # (was "of 3 (background included)")
    assert "  most frequent: n01 2, n02 1" in lines
    assert lines[1] == "classes: 2 (from the classes seen in the train split)"  # (no background)


def test_plan_leaves_classes_without_images_out_of_the_most_frequent(tmp_path, capsys):
    # A split holding a few of the classes listed them with 0 as its most frequent too.
    root = tmp_path / "tree"
    for stem in ("n01/a", "n02/b", "n03/c"):
        ilsvrc_image(root, "train", stem, jpeg_bytes(), task="CLS-LOC")
    ilsvrc_image(root, "val", "n02/d", jpeg_bytes(), task="CLS-LOC")
    assert plan_tool.main(["--input_dir", str(root)]) == 0
    text = capsys.readouterr().out
    validation = text[text.index("\nvalidation ") :]
    assert "\n  most frequent: n02 1\n  least frequent: n01 0, n03 0, n02 1\n" in validation


def test_plan_reads_no_pixels(tmp_path, capsys):
    """Images that do not decode plan as examples: the build is what finds them out (but for a
    file too small to be an image: below)."""
    root = tmp_path / "tree"
    for n in range(6):
        xml = voc_xml([("cat" if n % 3 else "dog", 1, 1, 10, 10)], size=(20, 20))
        data = jpeg_bytes() if n else jpeg_bytes()[: plan_tool.SMALL_FILE_BYTES + 100]
        ilsvrc_image(root, "train", f"i{n}", data, xml)
        ilsvrc_image(root, "val", f"v{n}", jpeg_bytes(), xml)
    assert plan_tool.main(["--input_dir", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["train"]["examples"] == 6


def test_plan_warns_of_a_validation_split_without_annotations(tmp_path, capsys):
    root = tmp_path / "tree"
    for n in range(3):
        ilsvrc_image(root, "train", f"i{n}", jpeg_bytes(), voc_xml([("cat", 1, 1, 9, 9)]))
        ilsvrc_image(root, "val", f"v{n}", jpeg_bytes())  # its XML were never copied
    assert plan_tool.main(["--input_dir", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert plan_tool.main(["--input_dir", str(root), "--num_shards", "train=5,val=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (train,) = [i for i, line in enumerate(lines) if line.startswith("  shards: 3 of 1 example")]
    assert lines[train + 1] == "  (not the 5 shards asked for: a shard holds at least one example)"
    assert lines.count(lines[train + 1]) == 1  # validation: 2 of 3, as asked
    assert plan_tool.main(["--input_dir", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == (
        f"Unlabelled: the validation split has no annotations ({root}/Annotations/DET/val is "
        "empty or missing): its examples get label -1; put its XML there to label it"
    )
    assert "validation (unlabelled):" in lines


def test_verify_runs_from_the_command_line_too(sample, capsys):
    _, out, info = sample
    assert commands.main(["verify", str(out), "--workers", "1"]) == 0
    shards = sum(split.num_shards for split in info.splits.values())
    assert capsys.readouterr().out == f"OK: {shards} shards verified\n"


def test_plan_counts_class_folder_images_without_xml(tmp_path, capsys):
    # CLS-LOC: three class-folder images without XML, one with; a stray image outside any folder.
    root = tmp_path / "tree"
    xml = voc_xml([("n01", 1, 1, 10, 10)], size=(20, 20))
    ilsvrc_image(root, "train", "n01/a", jpeg_bytes(), xml, task="CLS-LOC")
    for stem in ("n01/b", "n02/c", "n02/d"):
        ilsvrc_image(root, "train", stem, jpeg_bytes(), task="CLS-LOC")
    ilsvrc_image(root, "train", "stray", jpeg_bytes(), task="CLS-LOC")
    # Two images of one key with an XML, rejected as listed: counted in `images`, in none of
    # its parts. (Without an XML, n02/c.png beside n02/c.JPEG, both are images of their own.)
    ilsvrc_image(root, "train", "n02/e", jpeg_bytes(), xml, task="CLS-LOC")
    write(root / "Data/CLS-LOC/train/n02/e.png", png_bytes())
    write(root / "Data/CLS-LOC/train/n02/c.png", png_bytes())
    ilsvrc_image(root, "test", "t", jpeg_bytes(), task="CLS-LOC")  # not asked for
    assert plan_tool.main(["--input_dir", str(root), "--splits", "train"]) == 1  # the stray
    lines = capsys.readouterr().out.splitlines()
    # It read "with XML 1, without XML 1 and in no class folder; 3 more without XML in class
    # folders", the "more" within the 5; and the parts did not add up to the images.
    assert (
        "  images 8: with XML 1, without XML in a class folder 4, without XML or class folder 1, "
        "rejected as listed 2 (below)"
    ) in lines
    assert "  would reject 3: ambiguous_key 2, no_class 1" in lines
    assert lines[-2] == (
        "Not built: the tree's test split (--splits is train); to build it too, pass --splits "
        "train,test"
    )
    assert lines[-1].startswith("The build would be refused: 3 of 8 images rejected ")
    assert plan_tool.main(["--input_dir", str(root), "--splits", "train", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["unbuilt_splits"] == ["test"]


def test_a_reader_that_leaves_early_gets_no_traceback(sample):
    # `stats OUT | head -1`: the pipe closes before the command has written everything.
    _, out, _ = sample
    script = (
        "import os, sys; from beam_pipeline.tools import commands; r, w = os.pipe(); os.close(r); "
        "os.dup2(w, 1); sys.exit(commands.main(['stats', sys.argv[1]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr
    # `--help | head` (the usage, and a command's argparse help): a trace at the exit's flush.
    for argv in (["--help"], ["verify", "--help"]):
        script = (
            "import os, sys; from beam_pipeline.tools import commands; r, w = os.pipe(); "
            f"os.close(r); os.dup2(w, 1); sys.exit(commands.cli({argv!r}))"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert done.stderr == "", argv  # (argparse's help swallows the error itself: exit 0)


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    """8 good train images (cat, dog), an empty `.JPEG`, a JPEG cut to 14 bytes (both with XML),
    a valid 67-byte PNG named `.JPEG` (no XML: background), and 2 good val images."""
    root = tmp_path_factory.mktemp("small")
    for n in range(8):
        xml = voc_xml([(("cat", "dog")[n % 2], 2, 2, 40, 30)], size=(64, 48))
        ilsvrc_image(root, "train", f"good_{n}", jpeg_bytes(), xml)
    xml = voc_xml([("cat", 2, 2, 40, 30)], size=(64, 48))
    ilsvrc_image(root, "train", "empty", b"", xml)
    ilsvrc_image(root, "train", "stub", b"\xff\xd8\xff\xe0 cut short", xml)
    ilsvrc_image(root, "train", "tiny", png_bytes(1, 1, "L"))
    for n in range(2):
        ilsvrc_image(root, "val", f"v{n}", jpeg_bytes(), voc_xml([("dog", 1, 1, 30, 30)]))
    return root


def test_plan_counts_the_files_too_small_to_be_an_image_the_build_rejects(
    small_files, capsys, tmp_path
):
    root = small_files
    assert len(png_bytes(1, 1, "L")) == 67 < plan_tool.SMALL_FILE_BYTES
    code, text, _ = run_plan(capsys, "--input_dir", root, "--num_shards", "train=3")
    assert code == 1
    lines = text.splitlines()
    assert lines[0].startswith(
        f"Plan for {root} (ilsvrc_det): 25 files listed, no pixels read but those of 2 files too "
        "small to be an image, nothing written ("
    )
    train = lines.index("train (annotated):")
    # The 2 rejected count in no class; the shards (3, 4, 4 planned) hold 2-4 examples.
    assert lines[train + 1 : train + 9] == [
        "  images 11: with XML 10, without XML 1 (background)",
        "  label sources: background 1, xml 8",
        "  classes present: 3 of 3 (background included)",
        "  most frequent: cat 4, dog 4, background 1",
        "  least frequent: background 1, cat 4, dog 4",
        "  would reject 2: empty_file 1, truncated_image 1",
        "  shards: 3 of 2-4 examples (9 examples); images 6.6 KiB, records about 12.8 KiB if "
        "every image is a JPEG kept as it is",
        "",
    ]
    empty, stub = root / "Data/DET/train/empty.JPEG", root / "Data/DET/train/stub.JPEG"
    assert lines[-5:-1] == [
        "files rejected or reported (2; --json lists them all):",
        f"  {empty}: empty_file: the file has 0 bytes",
        f"  {stub}: truncated_image: JPEG: Truncated File Read",
        "",
    ]
    shared = (
        "2 of 13 images rejected (15.38%), more than --max_bad_fraction=0.01; reasons "
        "{'empty_file': 1, 'truncated_image': 1}"
    )
    assert lines[-1] == (
        f"The build would fail once its shards are written: {shared}; too small to be an image "
        f"(under 125 bytes): {empty} (empty_file: the file has 0 bytes), {stub} "
        "(truncated_image: JPEG: Truncated File Read); to build without them, remove them from "
        "the tree or pass --max_bad_fraction 0.16"
    )
    # The build fails as plan said, with the same numbers and the same budget to pass.
    out = tmp_path / "out"
    argv = ["--input_dir", str(root), "--output_dir", str(out), "--num_shards", "train=3"]
    assert build_tool.main(argv) == 1
    assert failure_line(capsys.readouterr().err) == (
        f"BUILD FAILED: {shared}; see {out / 'rejected.jsonl'}; to commit the build without "
        "them, rerun with --max_bad_fraction 0.16 --resume (it keeps the shards written)"
    )
    planned = json.loads(run_plan(capsys, "--input_dir", root, "--json")[1])["rejections"]
    assert dead_letters(out) == planned  # each file, its reason and detail, as plan said
    # A rebuild (--overwrite) over its budget: the advice is the rebuild's, which then commits
    # (it said --resume, which a directory holding a complete build refuses).
    assert build_tool.main([*argv, "--max_bad_fraction", "0.16"]) == 0
    assert build_tool.main([*argv, "--overwrite"]) == 1
    assert failure_line(capsys.readouterr().err).endswith(
        "rerun with --max_bad_fraction 0.16 --overwrite --resume (it keeps the shards written)"
    )
    assert build_tool.main([*argv, "--max_bad_fraction", "0.16", "--overwrite", "--resume"]) == 0


def test_plan_of_a_tree_with_small_files_is_what_its_build_did(small_files, capsys, tmp_path):
    root = small_files
    argv = ["--input_dir", root, "--num_shards", "train=3", "--max_bad_fraction", "0.2"]
    code, text, _ = run_plan(capsys, *argv, "--json")
    assert code == 0
    plan = json.loads(text)
    assert (plan["would_build"], plan["failure"], plan["small_files_read"]) == (True, None, 2)
    out = tmp_path / "out"
    info = build(root, out, "--num_shards", "train=3", "--max_bad_fraction", "0.2")
    for name, split in info.splits.items():
        planned = plan_agrees(plan, name, split)
        written = sorted(shard.num_examples for shard in split.shards)
        assert planned["examples_per_shard"] == [written[0], written[-1]]
    assert plan["splits"]["train"]["examples"] == 9  # 11 images, 2 rejected; the PNG kept
    assert plan["splits"]["train"]["rejected"] == {"empty_file": 1, "truncated_image": 1}
    assert plan["rejections"] == dead_letters(out)
    code, text, _ = run_plan(capsys, *argv)
    assert code == 0 and text.splitlines()[-1] == "The build would go ahead."


def test_plan_of_a_split_whose_every_image_is_empty_fails_as_the_build_does(tmp_path, capsys):
    # The build wrote the split's shard empty and committed it (within --max_bad_fraction 1),
    # and plan said it would go ahead; an empty split now fails the build, and plan says so.
    root = tmp_path / "tree"
    for n in range(2):
        ilsvrc_image(root, "train", f"t{n}", jpeg_bytes(), voc_xml([("cat", 1, 1, 30, 30)]))
    ilsvrc_image(root, "val", "v", b"", voc_xml([("cat", 1, 1, 30, 30)]))
    argv = ["--input_dir", root, "--max_bad_fraction", "1"]
    code, text, _ = run_plan(capsys, *argv)
    assert code == 1
    lines = text.splitlines()
    validation = lines[lines.index("validation (annotated):") :]
    assert "  would reject 1: empty_file 1" in validation
    said = (
        "split 'validation': all 1 images would be rejected ({'empty_file': 1}), so it would "
        "hold none; mend them, or leave the split out (--splits)"
    )
    assert lines[-1] == f"The build would fail once its shards are written: {said}"
    with pytest.raises(BuildFailed, match=re.escape(said.replace("would be", "were")[:60])):
        build(root, tmp_path / "out", "--max_bad_fraction", "1")


def test_plan_foresees_the_boxes_the_writer_rejects_by_the_xml_size(tmp_path, capsys):
    # A box without width once stored (float32) by the XML's <size>: plan had said "The build
    # would go ahead", the build then failed over its error budget. (A box outside the
    # <size> is the XML's own rejection, as the build's.)
    root = tmp_path / "tree"
    boxes = {"flat": ("cat", 5, 1, 5.0000001, 10)}
    boxes |= {f"fine{n}": ("cat", 1, 1, 10, 10) for n in range(4)}
    for name, box in boxes.items():
        ilsvrc_image(root, "train", name, jpeg_bytes(), voc_xml([box], size=(64, 48)))
    argv = ["--input_dir", str(root), "--splits", "train"]
    assert plan_tool.main([*argv, "--json"]) == 1
    planned = json.loads(capsys.readouterr().out)
    (said,) = [(r["path"], r["reason"], r["detail"]) for r in planned["rejections"]]
    assert said[1] == "annotation_degenerate_box"
    assert planned["splits"]["train"]["examples"] == 4
    assert (
        f"boxes without area in their image: {said[0]} (annotation_degenerate_box: "
        in (planned["failure"])
    )
    assert build_tool.main([*argv, "--output_dir", str(tmp_path / "out")]) == 1
    capsys.readouterr()
    assert plan_tool.main([*argv, "--max_bad_fraction", "0.5"]) == 0
    assert "The build would go ahead" in capsys.readouterr().out
    build(root, tmp_path / "out", "--splits", "train", "--max_bad_fraction", "0.5", "--resume")
    rejected = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").open()]
    assert [(r["path"], r["reason"], r["detail"]) for r in rejected] == [said]
