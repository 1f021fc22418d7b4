import shutil

import pytest
from helpers import CORPUS, ilsvrc_image, jpeg_bytes, write

from beam_pipeline.core.entries import FileRef
from beam_pipeline.core.rejections import Rejection
from beam_pipeline.tree import layouts, locate, pairing, planner
from beam_pipeline.tree.folders import has_files, has_top_level_files, match, subdirectories
from beam_pipeline.tree.layouts import TreeAccess

VOC1 = CORPUS / "datumaro/voc_dataset/voc_dataset1"


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def plan(root, layout, splits=("train", "val")):
    return planner.plan_discovery(
        str(root), layout, splits, TreeAccess(has_files, match, read_text)
    )


def test_detects_each_layout(tmp_path):
    ilsvrc_image(tmp_path / "det", "train", "a/x", b"x")
    ilsvrc_image(tmp_path / "cls", "train", "n01/x", b"x", task="CLS-LOC")
    assert locate.detect_layout(str(tmp_path / "det"), has_files) == layouts.ILSVRC_DET
    assert locate.detect_layout(str(tmp_path / "cls"), has_files) == layouts.ILSVRC_CLS_LOC
    assert locate.detect_layout(str(VOC1), has_files) == layouts.VOC
    assert locate.detect_layout(str(VOC1.parent), has_files) == layouts.VOC  # a VOCdevkit


def test_empty_unknown_and_ambiguous_trees_are_refused(tmp_path):
    with pytest.raises(layouts.LayoutError, match="holds no files"):
        locate.detect_layout(str(tmp_path), has_files)
    write(tmp_path / "photos" / "a.jpg", b"x")
    with pytest.raises(layouts.LayoutError, match="not an ILSVRC"):
        locate.detect_layout(str(tmp_path), has_files)
    ilsvrc_image(tmp_path, "train", "a", b"x")
    ilsvrc_image(tmp_path, "train", "b", b"x", task="CLS-LOC")
    with pytest.raises(layouts.LayoutError, match="--layout"):
        locate.detect_layout(str(tmp_path), has_files)


def test_ilsvrc_plan_lists_image_and_annotation_dirs_per_split(tmp_path):
    ilsvrc_image(tmp_path, "train", "a/x", b"x")
    ilsvrc_image(tmp_path, "val", "y", b"x")
    result = plan(tmp_path, layouts.ILSVRC_DET)
    assert result.splits == ("train", "validation")
    assert [(t.kind, t.split, t.key_prefix) for t in result.tasks] == [
        ("images", "train", "train"),
        ("annotations", "train", "train"),
        ("images", "validation", "val"),
        ("annotations", "validation", "val"),
    ]
    with pytest.raises(layouts.LayoutError, match="'test' has no images"):
        plan(tmp_path, layouts.ILSVRC_DET, ("test",))


def test_split_list_ids_are_first_words_and_comments_whole_lines():
    text = "# made by hand\r\n2007_000001\r\n  hash#1  \n2007_000002  1\n\n#x\n 2007_3 # note\n"
    assert layouts.parse_split_list(text) == [
        "2007_000001",
        "hash#1",  # a '#' inside an id (it was cut to 'hash')
        "2007_000002",
        "2007_3",
    ]


def test_voc_plan_reads_split_lists_and_skips_comments():
    result = plan(CORPUS / "datumaro/voc_dataset/voc_dataset3", layouts.VOC, ("train",))
    assert result.memberships == (("voc_dataset3/2007_000001", "train"),)
    result = plan(VOC1, layouts.VOC, ("train", "test"))
    assert sorted(result.memberships) == [
        ("voc_dataset1/2007_000001", "train"),
        ("voc_dataset1/2007_000002", "test"),
    ]
    with pytest.raises(layouts.LayoutError) as error:
        plan(VOC1, layouts.VOC, ("val",))
    assert str(error.value).startswith("split 'val' has no list: ")
    # The per-class lists (<class>_<split>.txt) are not splits.
    assert str(error.value).endswith(
        "is missing; the splits there are ['test', 'train']: choose with --splits test,train"
    )


def test_a_voc_list_of_file_names_is_refused_naming_the_list_and_the_fix(tmp_path):
    # IMG_001.JPG in train.txt paired with no image: the build failed with "the train split
    # names no class … restore its annotations", or every image image_missing.
    root = tmp_path / "VOC2012"
    for i in range(3):
        write(root / "JPEGImages" / f"IMG_00{i}.jpg", jpeg_bytes())
    write(root / "ImageSets/Main/train.txt", "IMG_000.JPG\nIMG_001.jpg\nIMG_002\n")
    with pytest.raises(layouts.LayoutError) as error:
        plan(root, layouts.VOC, ("train",))
    assert str(error.value) == (
        f"{root}/ImageSets/Main/train.txt names images by file name (IMG_000.JPG, IMG_001.jpg): "
        "VOC split lists name them by id, without the extension (2008_000008 for "
        "JPEGImages/2008_000008.jpg). Strip the extensions: sed -i -E "
        f"'s/\\.(jpe?g|png|xml)$//I' {root}/ImageSets/Main/train.txt"
    )
    write(root / "ImageSets/Main/train.txt", "IMG_000\nIMG_001\nIMG_002.jpg\n")  # one: not all
    assert len(plan(root, layouts.VOC, ("train",)).memberships) == 3


def test_a_suggestion_of_splits_without_train_asks_for_a_labels_file_too(tmp_path):
    # Following `choose with --splits test` gave the next error: without the train split the
    # vocabulary is unknown. (trainval gives the classes as train does: VOC2007's protocol.)
    with pytest.raises(layouts.LayoutError) as error:
        plan(CORPUS / "datumaro/voc_dataset/voc_dataset2", layouts.VOC, ("train",))
    assert str(error.value).endswith(
        "the splits there are ['trainval']: choose with --splits trainval"
    )
    write(tmp_path / "ImageSets/Main/test.txt", "a\n")
    with pytest.raises(layouts.LayoutError) as error:
        plan(tmp_path, layouts.VOC, ("train",))
    assert str(error.value).endswith(
        "the splits there are ['test']: choose with --splits test and a --labels_file naming "
        "the classes (there is no train split to find them in)"
    )


def test_splits_in_the_tree_but_not_asked_for_are_named(tmp_path):
    for split in ("train", "val", "test"):
        ilsvrc_image(tmp_path, split, "n01/x" if split == "train" else "x", b"x", task="CLS-LOC")
    write(tmp_path / "Data/CLS-LOC/.cache/x.JPEG", b"x")  # a hidden folder is not a split
    (tmp_path / "Data/CLS-LOC/empty").mkdir()  # nor is a folder without files
    write(tmp_path / "Data/CLS-LOC/mac/._x.JPEG", b"x")  # nor one of hidden files alone
    write(tmp_path / "Data/CLS-LOC/mac/.DS_Store", b"x")

    def ilsvrc(splits):
        return planner.plan_discovery(
            str(tmp_path),
            layouts.ILSVRC_CLS_LOC,
            splits,
            TreeAccess(has_files, match, read_text, subdirectories),
        ).unbuilt

    assert ilsvrc(("train", "val")) == ("test",)
    assert ilsvrc(("train",)) == ("test", "val")
    assert ilsvrc(("train", "val", "test")) == ()

    devkit = tmp_path / "VOCdevkit"
    for year, lists in (("VOC2007", "train val trainval test"), ("VOC2012", "train val trainval")):
        for name in lists.split():
            ids = {"train": "a", "val": "b", "trainval": "a\nb", "test": "c"}[name]
            write(devkit / year / "ImageSets/Main" / f"{name}.txt", ids + "\n")
        write(devkit / year / "ImageSets/Main/cat_train.txt", "a 1\n")  # per class: not a split
        write(devkit / year / "JPEGImages/a.jpg", b"x")
    # trainval is train + val: all built. VOC2012 has no test list: VOC2007's is offered (a
    # split some years list comes from those).
    assert plan(devkit, layouts.VOC).unbuilt == ("test",)
    assert plan(devkit, layouts.VOC, ("train",)).unbuilt == ("test", "val")  # not trainval
    write(devkit / "VOC2012/ImageSets/Main/test.txt", "c\n")
    assert plan(devkit, layouts.VOC).unbuilt == ("test",)
    assert plan(devkit, layouts.VOC, ("trainval",)).unbuilt == ("test",)
    write(devkit / "VOC2012/ImageSets/Main/trainval.txt", "a\nb\nd\n")  # d: in no other list
    assert plan(devkit, layouts.VOC, ("test",)).unbuilt == ("train", "val")


def test_cls_loc_splits_whose_xml_lie_flat_pair_by_file_name(tmp_path):
    ilsvrc_image(tmp_path, "train", "n01/n01_1", b"x", "<annotation/>", task="CLS-LOC")
    ilsvrc_image(tmp_path, "val", "n01/v1", b"x", task="CLS-LOC")  # moved into its folder
    write(tmp_path / "Annotations/CLS-LOC/val/v1.xml", "<annotation/>")  # where it was
    assert has_top_level_files(str(tmp_path / "Annotations/CLS-LOC/val"), ".xml")
    assert not has_top_level_files(str(tmp_path / "Annotations/CLS-LOC/train"), ".xml")
    plan = planner.plan_discovery(
        str(tmp_path),
        layouts.ILSVRC_CLS_LOC,
        ("train", "val"),
        TreeAccess(has_files, match, read_text, subdirectories, has_top_level_files),
    )
    assert [(t.split, t.kind, t.key_by_name) for t in plan.tasks] == [
        ("train", "images", False),
        ("train", "annotations", False),
        ("validation", "images", True),
        ("validation", "annotations", True),
    ]
    image = pairing.classify(plan.tasks[2], f"{tmp_path}/Data/CLS-LOC/val/n01/v1.JPEG", 1)
    xml = pairing.classify(plan.tasks[3], f"{tmp_path}/Annotations/CLS-LOC/val/v1.xml", 1)
    assert image.key == xml.key == "val/v1" and image.folder_class == "n01"


def test_splits_other_than_test_without_annotations_are_named(tmp_path):
    def unannotated(root, layout):
        return planner.plan_discovery(
            str(root),
            layout,
            ("train", "val", "test"),
            TreeAccess(has_files, match, read_text, subdirectories),
        ).unannotated

    det = tmp_path / "det"
    for split in ("train", "val", "test"):
        ilsvrc_image(det, split, "x", b"x", "<annotation/>" if split == "train" else None)
    assert unannotated(det, layouts.ILSVRC_DET) == (("validation", f"{det}/Annotations/DET/val"),)
    cls = tmp_path / "cls"
    for split in ("train", "val", "test"):  # val in synset folders: its folders label it
        ilsvrc_image(cls, split, "x" if split == "test" else "n01/x", b"x", task="CLS-LOC")
    assert unannotated(cls, layouts.ILSVRC_CLS_LOC) == ()
    flat = tmp_path / "flat"  # ImageNet's val as downloaded, without its XML
    ilsvrc_image(flat, "train", "n01/x", b"x", task="CLS-LOC")
    for split in ("val", "test"):
        ilsvrc_image(flat, split, "x", b"x", task="CLS-LOC")
    assert unannotated(flat, layouts.ILSVRC_CLS_LOC) == (
        ("validation", f"{flat}/Annotations/CLS-LOC/val"),
    )


def test_overlapping_voc_lists_are_counted_and_trainval_is_not_offered_beside_its_parts(
    tmp_path,
):
    voc = tmp_path / "VOC2007"
    for name, ids in {"train": "a b", "val": "c b", "trainval": "a b c"}.items():
        write(voc / "ImageSets/Main" / f"{name}.txt", ids.replace(" ", "\n") + "\n")
    write(voc / "JPEGImages/a.jpg", b"x")
    assert plan(voc, layouts.VOC).shared_images() == {("train", "validation"): 1}  # b
    assert plan(voc, layouts.VOC, ("train", "val", "trainval")).shared_images() == {
        ("train", "trainval"): 1,  # a
        ("train", "trainval", "validation"): 1,  # b
        ("trainval", "validation"): 1,  # c
    }
    assert plan(voc, layouts.VOC, ("trainval",)).shared_images() == {}
    with pytest.raises(layouts.LayoutError) as error:
        plan(voc, layouts.VOC, ("test",))
    assert str(error.value).endswith(
        "the splits there are ['train', 'trainval', 'val']: choose with --splits train,val"
    )


def test_voc_devkit_with_several_years_prefixes_keys(tmp_path):
    for year in ("VOC2007", "VOC2012"):
        write(tmp_path / year / "ImageSets/Main/train.txt", "000001\n")
        write(tmp_path / year / "JPEGImages/000001.jpg", jpeg_bytes())
    result = plan(tmp_path, layouts.VOC, ("train",))
    assert sorted(result.memberships) == [("VOC2007/000001", "train"), ("VOC2012/000001", "train")]


def test_classify_builds_keys_relative_paths_and_folder_classes():
    task = layouts.ListingTask("images", "/r/Data/CLS-LOC/train", "train", "train", "/r", True)
    ref = pairing.classify(task, "/r/Data/CLS-LOC/train/n01440764/n01440764_1.JPEG", 10)
    assert ref == FileRef(
        relative_path="Data/CLS-LOC/train/n01440764/n01440764_1.JPEG",
        key="train/n01440764/n01440764_1",
        split="train",
        num_bytes=10,
        folder_class="n01440764",
    )


def test_classify_rejects_stray_files_and_undecodable_names():
    task = layouts.ListingTask("images", "/r/JPEGImages", "", "VOC2007", "/r")
    stray = pairing.classify(task, "/r/JPEGImages/notes.txt", 3)
    assert isinstance(stray, Rejection) and stray.reason == "not_an_image_file"
    assert stray.is_image is False
    # The detail said "unexpected extension '' in /r/JPEGImages": the split's folder, for a
    # file in a class folder below it, and nothing of what a .DS_Store is.
    assert stray.detail == "not an image by its name (extension '.txt')"
    for name, detail in (
        ("n01/.DS_Store", "macOS's folder view settings (.DS_Store), not part of the dataset"),
        ("Thumbs.db", "Windows' thumbnail cache (Thumbs.db), not part of the dataset"),
        ("n01/README", "not an image by its name (no extension)"),
        (  # (an iPhone user's photos: "not an image" said nothing of what to do)
            "n01/IMG_0001.HEIC",
            "a HEIF photo (iPhones' default), which Pillow cannot read (extension '.HEIC'): "
            "convert it to JPEG",
        ),
    ):
        assert pairing.classify(task, f"/r/JPEGImages/{name}", 3).detail == detail
    bad = pairing.classify(task, "/r/JPEGImages/caf\udce9.jpg", 3)
    assert bad.reason == "undecodable_path" and bad.path == "/r/JPEGImages/caf\\udce9.jpg"
    annotations = layouts.ListingTask("annotations", "/r/Annotations", "", "VOC2007", "/r")
    text = pairing.classify(annotations, "/r/Annotations/x.txt", 1)
    assert text.reason == "not_an_annotation_file"
    assert text.detail == "not an image's XML annotation by its name (extension '.txt')"
    # macOS's AppleDouble files beside each image and XML of a tree copied from a Mac.
    for directory, name, reason in (
        (task, "/r/JPEGImages/._2007_000001.jpg", "not_an_image_file"),
        (annotations, "/r/Annotations/._2007_000001.xml", "not_an_annotation_file"),
    ):
        apple = pairing.classify(directory, name, 4096)
        assert (apple.reason, apple.is_image, apple.path) == (reason, False, name)
        assert apple.detail.startswith("a macOS metadata file (AppleDouble")


def ref(path, key, split="train"):
    return FileRef(path, key, split, 5)


def test_pairing_by_key_and_negatives():
    entries, rejections = pairing.pair_files(
        "train/x", [ref("d/x.JPEG", "train/x")], [ref("a/x.xml", "train/x")], [], "/r"
    )
    assert rejections == []
    assert (entries[0].filename, entries[0].annotation_filename) == ("d/x.JPEG", "a/x.xml")
    entries, _ = pairing.pair_files("train/y", [ref("d/y.JPEG", "train/y")], [], [], "/r")
    assert entries[0].annotation_filename is None and entries[0].split == "train"


def test_annotation_without_image_and_listed_image_missing():
    _, rejections = pairing.pair_files("train/z", [], [ref("a/z.xml", "train/z")], [], "/r")
    assert [(r.path, r.reason, r.is_image) for r in rejections] == [
        ("/r/a/z.xml", "annotation_without_image", False)
    ]
    _, rejections = pairing.pair_files("VOC/9", [], [], ["train"], "/r")
    assert [(r.reason, r.is_image, r.split, r.detail) for r in rejections] == [
        ("image_missing", True, "train", "the train list names 'VOC/9' but no image has that key")
    ]
    _, rejections = pairing.pair_files("VOC/2012_000004.jpg", [], [], ["val"], "/r")
    assert [r.detail for r in rejections] == [
        "the val list names 'VOC/2012_000004.jpg' but no image has that key (a list names an "
        "image by its id, without extension: 2012_000004)"
    ]
    # café listed composed while the file's name is decomposed (copied from a Mac).
    _, rejections = pairing.pair_files("VOC/caf\u00e9", [], [], ["train"], "/r")
    assert [r.detail for r in rejections] == [
        "the train list names 'VOC/caf\u00e9' but no image has that key (if its image is there, "
        "named in another Unicode form, as a tree copied from a Mac has decomposed names, it has "
        "another key: rename it as the list writes it)"
    ]


def test_two_images_with_one_key_are_rejected_where_an_xml_or_a_list_names_it():
    images = [ref("d/x.JPEG", "train/x"), ref("d/x.png", "train/x")]
    xml = ref("a/x.xml", "train/x")
    for annotations, listed in (([xml], []), ([], ["train"])):
        entries, rejections = pairing.pair_files("train/x", images, annotations, listed, "/r")
        assert entries == [] and {r.path for r in rejections} == {"/r/d/x.JPEG", "/r/d/x.png"}
        assert {r.reason for r in rejections} == {"ambiguous_key"}
    # Without either (class folders), nothing is ambiguous: each is an entry, keyed apart.
    entries, rejections = pairing.pair_files("train/x", images, [], [], "/r")
    assert rejections == []
    assert [(e.key, e.filename) for e in entries] == [
        ("train/x\0d/x.JPEG", "d/x.JPEG"),
        ("train/x\0d/x.png", "d/x.png"),
    ]


def test_voc_image_in_no_requested_split_is_not_an_entry():
    entries, rejections = pairing.pair_files(
        "VOC/7", [ref("d/7.jpg", "VOC/7", split="")], [], [], "/r"
    )
    assert entries == [] and rejections == []


def test_a_tree_one_level_down_is_found(tmp_path):
    voc = tmp_path / "VOCtrainval" / "VOCdevkit"
    shutil.copytree(VOC1, voc / "VOC2007")
    write(tmp_path / "VOCtrainval" / "README.txt", "a download folder")
    ilsvrc_image(tmp_path / "kaggle" / "ILSVRC", "train", "n01/x", b"x", task="CLS-LOC")
    write(tmp_path / "kaggle" / "LOC_synset_mapping.txt", "n01 a class\n")

    def found_at(root, layout=layouts.AUTO):
        return locate.locate_tree(str(root), layout, has_files, subdirectories)

    assert found_at(tmp_path / "VOCtrainval") == (str(voc), layouts.VOC)
    assert found_at(voc) == (str(voc), layouts.VOC)  # at the root itself: kept
    assert found_at(tmp_path / "kaggle") == (
        str(tmp_path / "kaggle/ILSVRC"),
        layouts.ILSVRC_CLS_LOC,
    )
    kaggle = found_at(tmp_path / "kaggle", layouts.ILSVRC_CLS_LOC)
    assert kaggle == (str(tmp_path / "kaggle/ILSVRC"), layouts.ILSVRC_CLS_LOC)
    # Asked for another layout than the one here or below: the refusal names the tree's.
    with pytest.raises(layouts.LayoutError) as error:
        found_at(tmp_path / "kaggle", layouts.ILSVRC_DET)
    assert str(error.value).startswith(
        f"{tmp_path}/kaggle/ILSVRC holds the layout 'ilsvrc_cls_loc', not 'ilsvrc_det': "
    )
    # Naming the right layout keeps the hints: a folder inside the tree names the tree.
    with pytest.raises(layouts.LayoutError, match=r"inside the ilsvrc_cls_loc tree .*kaggle/ILSV"):
        found_at(tmp_path / "kaggle/ILSVRC/Data/CLS-LOC", layouts.ILSVRC_CLS_LOC)
    with pytest.raises(layouts.LayoutError, match=r"two levels below it: pass .*VOCdevkit or"):
        found_at(tmp_path, layouts.VOC)
    # A tree with a gap (no split lists yet) is kept: planning names what is missing.
    write(tmp_path / "bare" / "JPEGImages" / "x.jpg", b"x")
    assert found_at(tmp_path / "bare", layouts.VOC) == (str(tmp_path / "bare"), layouts.VOC)
    # A tree of another layout than the one asked for.
    with pytest.raises(layouts.LayoutError) as error:
        found_at(tmp_path / "kaggle/ILSVRC", layouts.ILSVRC_DET)
    assert str(error.value) == (
        f"{tmp_path}/kaggle/ILSVRC holds the layout 'ilsvrc_cls_loc', not 'ilsvrc_det': pass "
        "--layout ilsvrc_cls_loc or leave --layout out (it is detected)"
    )
    # Class folders or XML beside images, named on an ILSVRC tree: its folders (Annotations,
    # Data) were taken for classes, and its XML for none ("restore its annotations").
    # The tree itself or the download folder around it (class_folders built one class,
    # 'ILSVRC', exit 0).
    for named in (layouts.CLASS_FOLDERS, layouts.VOC_XML):
        for given in ("kaggle/ILSVRC", "kaggle"):
            with pytest.raises(layouts.LayoutError) as error:
                found_at(tmp_path / given, named)
            assert str(error.value).startswith(
                f"{tmp_path}/kaggle/ILSVRC holds the layout 'ilsvrc_cls_loc', not '{named}': "
            )
    with pytest.raises(layouts.LayoutError, match="holds the layout 'voc', not 'class_folders'"):
        found_at(voc, layouts.CLASS_FOLDERS)
    # A VOC year builds as XML beside images when that is asked for (its lists unread).
    assert found_at(voc, layouts.VOC_XML) == (str(voc), layouts.VOC_XML)
    # A folder inside a tree, and a folder two levels above trees: the refusal says where.
    with pytest.raises(layouts.LayoutError) as error:
        found_at(tmp_path / "kaggle/ILSVRC/Data/CLS-LOC")
    assert str(error.value).endswith(
        f"nor holds one in a subdirectory; it lies inside the ilsvrc_cls_loc tree "
        f"{tmp_path}/kaggle/ILSVRC: pass that as --input_dir"
    )
    with pytest.raises(layouts.LayoutError) as error:
        found_at(tmp_path)
    assert str(error.value).endswith(
        f"nor holds one in a subdirectory; a tree lies two levels below it: pass {voc} or "
        f"{tmp_path}/kaggle/ILSVRC as --input_dir"
    )


def test_several_trees_below_or_none_are_refused_naming_them(tmp_path):
    def refused(layout, *trees):
        with pytest.raises(layouts.LayoutError) as error:
            locate.locate_tree(str(tmp_path), layout, has_files, subdirectories)
        named = ", ".join(f"{tmp_path}/{tree}" for tree in trees)
        assert (
            str(error.value) == f"{tmp_path} holds several trees: {named}; pass one as --input_dir"
        )

    ilsvrc_image(tmp_path / "a", "train", "x", b"x")
    ilsvrc_image(tmp_path / "b", "train", "n01/x", b"x", task="CLS-LOC")
    refused(layouts.AUTO, "a (ilsvrc_det)", "b (ilsvrc_cls_loc)")
    found = locate.locate_tree(str(tmp_path), layouts.ILSVRC_DET, has_files, subdirectories)
    assert found == (f"{tmp_path}/a", layouts.ILSVRC_DET)
    # One a level down and one two: the first was built, the other unseen, exit 0.
    ilsvrc_image(tmp_path / "old" / "copy", "train", "x", b"x")
    refused(layouts.ILSVRC_DET, "a (ilsvrc_det)", "old/copy (ilsvrc_det)")
    found = locate.locate_tree(str(tmp_path), layouts.ILSVRC_CLS_LOC, has_files, subdirectories)
    assert found == (f"{tmp_path}/b", layouts.ILSVRC_CLS_LOC)
    ilsvrc_image(tmp_path / "b", "train", "y", b"x")  # b now holds DET and CLS-LOC
    with pytest.raises(layouts.LayoutError, match=r"b holds several layouts .*--layout$"):
        locate.locate_tree(str(tmp_path / "b"), layouts.AUTO, has_files, subdirectories)
    write(tmp_path / "photos" / "deep" / "a.jpg", b"x")
    with pytest.raises(layouts.LayoutError, match="nor holds one in a subdirectory"):
        locate.locate_tree(str(tmp_path / "photos"), layouts.AUTO, has_files, subdirectories)


def test_a_split_some_voc_years_list_comes_from_those_and_none_is_refused(tmp_path):
    # The VOC07+12 protocol (trainval of both years, VOC2007's test): VOC2012 has no test
    # list. Once refused, which left it to two builds.
    devkit = tmp_path / "VOCdevkit"
    shutil.copytree(VOC1, devkit / "VOC2007")
    shutil.copytree(VOC1, devkit / "VOC2012")
    (devkit / "VOC2012" / "ImageSets" / "Main" / "test.txt").unlink()
    found = plan(devkit, layouts.VOC, ("train", "test"))
    assert found.notes == (
        "Note: the test split comes from VOC2007 alone (VOC2012 has no test list)",
    )
    tests = {key.split("/")[0] for key, split in found.memberships if split == "test"}
    assert tests == {"VOC2007"}
    assert {k.split("/")[0] for k, s in found.memberships if s == "train"} == {"VOC2007", "VOC2012"}
    assert plan(devkit, layouts.VOC, ("train",)).unbuilt == ("test",)  # (VOC2007's: said)
    with pytest.raises(layouts.LayoutError) as error:
        plan(devkit, layouts.VOC, ("train", "val"))
    assert str(error.value) == (
        f"split 'val' has no list: {devkit}/VOC2007/ImageSets/Main/val.txt is missing; the "
        "splits every year lists are ['train']: choose with --splits train (each year lists: "
        "VOC2007: ['test', 'train']; VOC2012: ['train'])"
    )


def test_a_voc_year_without_main_lists_is_named_as_such(tmp_path):
    # It was told to "arrange it as Pascal VOC", which it is.
    year = tmp_path / "VOCtrainval_11-May-2012/VOCdevkit/VOC2012"
    write(year / "JPEGImages/2012_000001.jpg", jpeg_bytes())
    write(year / "Annotations/2012_000001.xml", "<annotation/>")
    write(year / "ImageSets/Segmentation/train.txt", "2012_000001\n")
    for given in (year, year.parent.parent):  # the year, and the download folder around it
        with pytest.raises(layouts.LayoutError) as refused:
            locate.locate_tree(str(given), layouts.AUTO, has_files, subdirectories)
        assert str(refused.value).endswith(
            f"; {year} is a Pascal VOC year without its detection split lists: "
            f"{year}/ImageSets/Main/<split>.txt is missing (its ImageSets/ holds Segmentation/ "
            "lists). Restore them from the VOC download, or write them: one image id (its file "
            "name without .jpg) per line, e.g. ImageSets/Main/train.txt"
        )


def test_a_link_in_a_loop_does_not_hide_the_folders_files_or_subfolders(tmp_path):
    # os.DirEntry.is_file() and is_dir() raise for a link in a loop: the first such entry
    # made has_top_level_files answer False for a folder of XML, and subdirectories crash.
    folder = tmp_path / "val"
    write(folder / "b.xml", "<annotation/>")
    write(folder / "n01" / "a.JPEG", jpeg_bytes())
    for i in range(60):  # many, so that one comes before b.xml in the directory's order
        for name in (f"a{i}.xml", f"n00{i}"):
            (folder / name).symlink_to(name)
    assert has_top_level_files(str(folder), ".xml")
    assert subdirectories(str(folder)) == ["n01"]
