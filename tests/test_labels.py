import pytest
from helpers import jpeg_bytes, write

from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box, voc_xml
from beam_pipeline.core.entries import IndexEntry, LabelledEntry
from beam_pipeline.core.examples import check_main_object
from beam_pipeline.core.labels import (
    ANNOTATED,
    CLASS_FOLDERS,
    UNLABELLED_SPLIT,
    ImageLabel,
    Vocabulary,
    clamped_area,
    image_label,
    main_object_index,
    parse_display_names,
    parse_labels_file,
    split_kind,
    unknown_class_name,
)
from beam_pipeline.core.rejections import InputError
from beam_pipeline.stages.labelling import parse_entry

VOCAB = Vocabulary(("cat", "dog", "n01440764"))


def obj(name, xmin, ymin, xmax, ymax):
    return AnnotatedObject(name, Box(xmin, ymin, xmax, ymax), difficult=False, truncated=False)


def test_main_object_is_the_largest_box():
    annotation = Annotation(100, 100, (obj("cat", 0, 0, 10, 10), obj("dog", 0, 0, 30, 20)))
    assert main_object_index(annotation) == 1
    assert image_label(annotation, None, VOCAB) == ImageLabel(1, (0, 1), "xml")


def test_tie_goes_to_the_first_object_in_the_file():
    annotation = Annotation(100, 100, (obj("dog", 0, 0, 10, 10), obj("cat", 50, 50, 60, 60)))
    assert image_label(annotation, None, VOCAB).label == 1


def test_a_tie_in_the_xmls_decimals_goes_to_the_first_where_floats_differ():
    # 0.3 - 0.1 < 0.2 in binary floats: a 2 x 10 box ranked below another 2 x 10 one, and the
    # second box labelled the image (found by a differential trial).
    for first, second in [((0.1, 0.3), (0, 0.2)), ((0, 0.7), (0.1, 0.8))]:
        boxes = (obj("dog", first[0], 0, first[1], 10), obj("cat", second[0], 0, second[1], 10))
        assert main_object_index(Annotation(40, 30, boxes)) == 0
        assert main_object_index(Annotation(40, 30, boxes[::-1])) == 0
    # Decimals a float tells apart by less than its rounding are still ranked exactly.
    big = (obj("dog", 0, 0, 0.3, 10), obj("cat", 0.1, 0, 0.400000000000001, 10))
    assert main_object_index(Annotation(40, 30, big)) == 1
    # Clamped to the image, as clamped_area: equal inside it, the first wins.
    edge = (obj("dog", 39.9, 0, 40.7, 10), obj("cat", -0.1, 0, 0.1, 10))
    assert main_object_index(Annotation(40, 30, edge)) == 0
    assert main_object_index(Annotation(None, None, edge)) == 0  # 0.8 x 10 against 0.2 x 10
    # Whole-pixel boxes (VOC's, ILSVRC's) compare as floats, exactly: within 1e-6 but apart.
    whole = (obj("dog", 0, 0, 4_000_000, 4_000_000), obj("cat", 0, 0, 4_000_000, 4_000_001))
    assert main_object_index(Annotation(None, None, whole)) == 1
    assert main_object_index(Annotation(None, None, (whole[0], whole[0]))) == 0


@pytest.mark.parametrize(
    "name, why",
    [
        (" cat", "begins or ends with a space"),
        ("dog ", "begins or ends with a space"),
        ("dog\nx", "holds the control character '\\n'"),
        ("a\tb", "holds the control character '\\t'"),
        ("", "is empty"),
    ],
)
def test_a_class_name_the_label_files_cannot_hold_is_refused(name, why):
    # labels.txt and TFDS's label files hold a name a line, and TFDS strips each: a folder
    # 'dog\nx' made two lines of one class, and TFDS named ' cat' 'cat' (exit 0, verify OK).
    with pytest.raises(ValueError) as refused:
        Vocabulary(("ant", name))
    assert str(refused.value) == (
        f"the class name {name!r} {why}: the build's label files (labels.txt, TFDS's) hold a "
        "name a line and TFDS reads each without its end spaces, so it would not read back as "
        "written; rename its class folder (or its XML <name>)"
    )
    assert Vocabulary(("a cat", "dog-x", "caf\u00e9")).classes == ("a cat", "dog-x", "café")


def test_area_is_clamped_to_the_annotated_image():
    # The cat box is huge but mostly outside a 50x50 image: 50*10 inside vs dog 40*40.
    annotation = Annotation(50, 50, (obj("cat", 0, 0, 1000, 10), obj("dog", 0, 0, 40, 40)))
    assert clamped_area(annotation.objects[0].box, 50, 50) == 500
    assert image_label(annotation, None, VOCAB).label == 1


def test_no_objects_is_background_which_is_the_last_index():
    assert image_label(Annotation(10, 10, ()), None, VOCAB) == ImageLabel(3, (), "background")
    assert image_label(None, None, VOCAB) == ImageLabel(3, (), "background")
    assert VOCAB.background_index == 3
    assert VOCAB.one_hot(3) == [0, 0, 0, 1]
    assert VOCAB.name(3) == "background"


def test_folder_class_labels_images_without_objects():
    assert image_label(None, "n01440764", VOCAB) == ImageLabel(2, (), "folder")
    # An XML object still wins over the folder; that they disagree is recorded.
    found = image_label(Annotation(9, 9, (obj("cat", 0, 0, 5, 5),)), "n01440764", VOCAB)
    assert found == ImageLabel(0, (0,), "xml", folder_disagrees=True)
    agreeing = image_label(Annotation(9, 9, (obj("dog", 0, 0, 5, 5),)), "dog", VOCAB)
    assert agreeing == ImageLabel(1, (1,), "xml", folder_disagrees=False)


def test_unknown_class_is_an_input_error():
    with pytest.raises(InputError) as error:
        image_label(Annotation(9, 9, (obj("zebra", 0, 0, 5, 5),)), None, VOCAB)
    assert error.value.reason == "unknown_class"
    assert "zebra" in error.value.detail


def test_one_hot_has_num_classes_plus_one_entries():
    assert VOCAB.one_hot(0) == [1, 0, 0, 0]


def test_vocabulary_from_names_is_sorted_and_distinct():
    assert Vocabulary.from_names(["dog", "cat", "dog"]).classes == ("cat", "dog")
    with pytest.raises(ValueError):
        Vocabulary(("a", "a"))


def test_labels_file_formats():
    text = "# synsets\nn01440764 tench, Tinca tinca\n\nn01443537 goldfish\n"
    assert parse_labels_file(text) == ("n01440764", "n01443537")
    with pytest.raises(ValueError, match="twice"):
        parse_labels_file("a\nb\na\n")
    with pytest.raises(ValueError, match="no classes"):
        parse_labels_file("# nothing\n")


@pytest.mark.parametrize(
    "text, line",
    [
        ("synset,name\nn01440764,tench\n", "line 1 ('synset,name')"),  # a header took index 0
        ("n01440764\nn01443537,goldfish\n", "line 2 ('n01443537,goldfish')"),
    ],
)
def test_a_csv_labels_file_is_refused_naming_its_line(text, line):
    with pytest.raises(ValueError) as refused:
        parse_labels_file(text)
    assert str(refused.value) == (
        f"{line} is not a class: a class is a line's first word, up to a space (a CSV file, "
        "with a header or commas, is not read; LOC_synset_mapping.txt, a list of synsets, or a "
        "build's labels.txt is)"
    )


def test_a_line_that_is_a_class_folders_name_is_that_class_spaces_and_all():
    text = "  sea lion \ncat Felis catus\ngolden\ngolden retriever\n"
    whole = {"sea lion", "cat", "golden", "golden retriever"}
    assert parse_labels_file(text, whole) == ("sea lion", "cat", "golden", "golden retriever")
    assert parse_display_names(text, whole) == {"cat": "Felis catus"}
    assert parse_labels_file("sea lion\ncat\n") == ("sea", "cat")


def test_a_class_name_with_a_space_is_explained_when_its_first_word_repeats():
    # A build's labels.txt of class folders `golden` and `golden retriever`.
    with pytest.raises(ValueError) as refused:
        parse_labels_file("golden\ngolden retriever\n")
    assert str(refused.value) == (
        "the labels file lists these classes twice: ['golden'] (a class is a line's first "
        "word, so 'golden retriever' names 'golden': a class whose name holds a space cannot "
        "be listed; rename it)"
    )


def test_display_names_follow_a_space_or_a_tab():
    text = "n01440764 tench, Tinca tinca\nn01443537\tgoldfish\nn01484850\n"
    assert parse_labels_file(text) == ("n01440764", "n01443537", "n01484850")
    assert parse_display_names(text) == {
        "n01440764": "tench, Tinca tinca",
        "n01443537": "goldfish",  # it was under the key 'n01443537\tgoldfish'
    }


def test_real_imagenet_label_list():
    from helpers import CORPUS

    classes = parse_labels_file((CORPUS / "imagenet/tfds_imagenet2012_labels.txt").read_text())
    assert len(classes) == 1000 and classes[0] == "n01440764"


def test_a_split_is_labelled_by_class_folders_by_xml_or_not_at_all():
    assert split_kind(has_annotations=True, has_class_folders=True) == CLASS_FOLDERS
    assert split_kind(has_annotations=False, has_class_folders=True) == CLASS_FOLDERS
    assert split_kind(has_annotations=True, has_class_folders=False) == ANNOTATED
    assert split_kind(has_annotations=False, has_class_folders=False) == UNLABELLED_SPLIT


def test_an_image_without_xml_or_folder_depends_on_its_split():
    assert image_label(None, None, VOCAB, ANNOTATED) == ImageLabel(3, (), "background")
    assert image_label(None, None, VOCAB, UNLABELLED_SPLIT) == ImageLabel(-1, (), "unlabelled")
    with pytest.raises(InputError) as error:
        image_label(None, None, VOCAB, CLASS_FOLDERS)
    assert error.value.reason == "no_class"
    assert "outside any class folder" in error.value.detail


def test_in_a_class_folder_split_xml_and_folders_still_label():
    assert image_label(None, "dog", VOCAB, CLASS_FOLDERS) == ImageLabel(1, (), "folder")
    with_objects = Annotation(9, 9, (obj("cat", 0, 0, 5, 5),))
    assert image_label(with_objects, None, VOCAB, CLASS_FOLDERS) == ImageLabel(0, (0,), "xml")
    # An XML without objects is an explicit negative, wherever it lies.
    empty = Annotation(9, 9, ())
    assert image_label(empty, None, VOCAB, CLASS_FOLDERS) == ImageLabel(3, (), "background")


def test_unlabelled_is_minus_one_with_an_all_zero_one_hot_and_no_name():
    assert VOCAB.one_hot(-1) == [0, 0, 0, 0]
    assert VOCAB.name(-1) == ""


@pytest.mark.parametrize("names", [("cat", "background"), ("background",)])
def test_a_class_named_like_the_background_class_is_refused(names):
    with pytest.raises(ValueError, match="a class is named 'background', the name of the back"):
        Vocabulary(names)


@pytest.mark.parametrize("name", ["zebra", "o'clock", 'say "hi"', "n09999999"])
def test_the_unknown_class_is_read_back_from_its_rejection(name):
    with pytest.raises(InputError) as error:
        VOCAB.index(name)
    assert unknown_class_name(error.value.detail) == name
    assert unknown_class_name("something else") is None


def test_an_xml_without_size_is_labelled_by_the_size_in_the_image_header(tmp_path):
    # 50x50 image; the cat box is 10,000 px wide unclamped, 40x10 inside the image.
    write(tmp_path / "Data/x.JPEG", jpeg_bytes(50, 50))
    write(
        tmp_path / "Annotations/x.xml",
        voc_xml([("cat", 10, 0, 10000, 10), ("dog", 0, 0, 30, 30)]),
    )
    entry = IndexEntry("train", "train/x", "Data/x.JPEG", "Annotations/x.xml", None, 0)
    parsed = parse_entry(str(tmp_path), entry)
    assert (parsed.annotation.width, parsed.annotation.height) == (50, 50)
    assert image_label(parsed.annotation, None, VOCAB).label == 1  # dog: 900 px against 400


def test_a_label_that_the_decoded_size_would_change_is_refused_when_written():
    # The header could not be read when labelling (no size): the writer's decoded size decides.
    annotation = Annotation(None, None, (obj("cat", 10, 0, 10000, 10), obj("dog", 0, 0, 30, 30)))
    unclamped = image_label(annotation, None, VOCAB)
    assert unclamped.label == 0  # cat, by its unclamped area
    entry = IndexEntry("train", "train/x", "x.JPEG", "x.xml", None, 0)
    labelled = LabelledEntry(entry, annotation, unclamped.label, unclamped.object_labels, "xml")
    with pytest.raises(InputError, match="size_unknown"):
        check_main_object(labelled, 50, 50)
    check_main_object(labelled, 20000, 50)  # the cat's box is the largest in this image
