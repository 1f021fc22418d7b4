import pytest
from helpers import CORPUS

from beam_pipeline.core.annotations import Box, parse_annotation, voc_xml
from beam_pipeline.core.labels import main_object_index
from beam_pipeline.core.rejections import InputError

SIZE = "annotation_bad_size"
BOX = "<bndbox><xmin>1</xmin><ymin>2</ymin><xmax>3</xmax><ymax>4</ymax></bndbox>"


def test_real_voc2008_annotation_reads_every_object_in_any_element_order():
    data = (CORPUS / "voc_xml/tzutalin_ImageNet_Utils/2008_004649.xml").read_bytes()
    annotation = parse_annotation(data)
    assert (annotation.width, annotation.height) == (500, 375)
    assert [o.name for o in annotation.objects] == ["horse", "person"]
    assert annotation.objects[0].box == Box(185.0, 110.0, 264.0, 299.0)
    assert annotation.objects[1].box == Box(168.0, 58.0, 276.0, 217.0)
    # <difficult> comes after <bndbox> in this file and is still read.
    assert all(o.difficult is False for o in annotation.objects)
    # person 108x159 > horse 79x189: the person is the main object.
    assert main_object_index(annotation) == 1


def test_filename_that_lies_is_ignored():
    # 000001.xml says <filename>000002.jpg</filename>: only geometry and classes are read.
    data = (CORPUS / "voc_xml/mmdetection_VOC2012/000001.xml").read_bytes()
    annotation = parse_annotation(data)
    assert len(annotation.objects) == 1
    assert annotation.objects[0].name == "train"
    assert annotation.objects[0].box == Box(139.0, 200.0, 207.0, 301.0)


def test_nested_part_bndbox_does_not_replace_the_object_box():
    data = (CORPUS / "datumaro/voc_dataset/voc_dataset1/Annotations/2007_000001.xml").read_bytes()
    annotation = parse_annotation(data)
    person = next(o for o in annotation.objects if o.name == "person")
    # The person's own box, not its <part><bndbox> (5.5, ...).
    assert person.box == Box(4.0, 5.0, 6.0, 7.0)


def test_float_coordinates_and_missing_flags():
    annotation = parse_annotation(
        b"<annotation><object><name>cat</name><bndbox><xmin>1.5</xmin><ymin>2.25</ymin>"
        b"<xmax>10.75</xmax><ymax>20</ymax></bndbox></object></annotation>"
    )
    assert annotation.width is None and annotation.height is None
    (cat,) = annotation.objects
    assert cat.box == Box(1.5, 2.25, 10.75, 20.0)
    assert (cat.difficult, cat.truncated) == (False, False)
    (dog,) = parse_annotation(voc_xml([("dog", "+1e1", "2.", ".5e2", "6E1")]).encode()).objects
    assert dog.box == Box(10.0, 2.0, 50.0, 60.0)


def test_flags_are_read():
    annotation = parse_annotation(voc_xml([("dog", 1, 2, 3, 4, 1, 1)], size=(10, 10)).encode())
    assert (annotation.objects[0].difficult, annotation.objects[0].truncated) == (True, True)


@pytest.mark.parametrize("flags", [(2, 0), (0, -1), (0.5, 0), (0, "1e1")])
def test_flags_other_than_0_and_1_are_refused(flags):
    # A 2 or a -1 was read as set: no VOC tool writes them, so which was meant is a guess.
    xml = voc_xml([("dog", 1, 2, 3, 4, *flags)], size=(10, 10))
    with pytest.raises(InputError, match=r"object #0 \(dog\): <\w+> is '.+', not 0 or 1"):
        parse_annotation(xml.encode())
    (dog,) = parse_annotation(voc_xml([("dog", 1, 2, 3, 4, "1.0", "0e0")]).encode()).objects
    assert (dog.difficult, dog.truncated) == (True, False)


@pytest.mark.parametrize("difficult, truncated", [("True", "false"), ("FALSE", "true")])
def test_flags_written_as_booleans_are_read(difficult, truncated):
    # Converters that write Python's True/False: the image was rejected as a bad object.
    xml = voc_xml([("dog", 1, 2, 3, 4, difficult, truncated)], size=(10, 10))
    (dog,) = parse_annotation(xml.encode()).objects
    assert (dog.difficult, dog.truncated) == (difficult == "True", truncated == "true")


def test_xml_without_objects_is_a_negative_not_an_error():
    annotation = parse_annotation(voc_xml([], size=(64, 48)).encode())
    assert annotation.objects == ()
    assert (annotation.width, annotation.height) == (64, 48)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "annotation_empty"),
        (b"  \n", "annotation_empty"),
        (b"<annotation><object><name>cat</name>", "annotation_malformed"),
        (b"<root/>", "annotation_not_voc"),
        (b"<annotation><object><bndbox/></object></annotation>", "annotation_bad_object"),
        (b"<annotation><object><name>cat</name></object></annotation>", "annotation_bad_object"),
        (voc_xml([("cat", "a", 1, 5, 5)]).encode(), "annotation_bad_coordinate"),
        (voc_xml([("cat", "nan", 1, 5, 5)]).encode(), "annotation_bad_coordinate"),
        (voc_xml([("cat", "1_0", 1, 50, 5)]).encode(), "annotation_bad_coordinate"),
        (voc_xml([("cat", "Infinity", 1, 50, 5)]).encode(), "annotation_bad_coordinate"),
        (voc_xml([("cat", "0x10", 1, 50, 5)]).encode(), "annotation_bad_coordinate"),
        (voc_xml([("cat", 5, 1, 2, 5)]).encode(), "annotation_degenerate_box"),
        (voc_xml([("cat", 1, 1, 1, 5)]).encode(), "annotation_degenerate_box"),
        (
            b"<annotation><size><width>x</width><height>3</height></size></annotation>",
            "annotation_bad_size",
        ),
        # Numbers as a coordinate's: float() took "4_0", "nan" and other scripts' digits.
        (b"<annotation><size><width>4_0</width><height>3</height></size></annotation>", SIZE),
        (
            "<annotation><size><width>\u0664\u0660</width><height>3</height></size>"
            "</annotation>".encode(),
            SIZE,
        ),
        (voc_xml([("cat", 1, 1, 5, 5, "nan", 0)]).encode(), "annotation_bad_object"),
        (voc_xml([("cat", 1, 1, 5, 5, 0, "\u0661")]).encode(), "annotation_bad_object"),
    ],
)
def test_bad_annotations_are_rejected_with_a_reason(data, reason):
    with pytest.raises(InputError) as error:
        parse_annotation(data)
    assert error.value.reason == reason


BOX_XML = b"<bndbox><xmin>10</xmin><ymin>1</ymin><xmax>500</xmax><ymax>50</ymax></bndbox>"
DOG_XML = b"<object><name>dog</name>" + BOX_XML.replace(b"500", b"20") + b"</object>"


@pytest.mark.parametrize(
    "body, reason, said",
    [
        # An adversarial trial: each was read as another object, or none, exit 0.
        (
            b'<object xmlns="http://x"><name>cat</name>' + BOX_XML + b"</object>" + DOG_XML,
            "annotation_not_voc",
            "<object> is in the XML namespace 'http://x': VOC's tags have none, and it would be "
            "passed over",
        ),
        (
            b'<v:object xmlns:v="v"><name>cat</name>' + BOX_XML + b"</v:object>" + DOG_XML,
            "annotation_not_voc",
            "<object> is in the XML namespace 'v'",
        ),
        (
            b'<object><name>cat</name><bndbox xmlns="n"><xmin>10</xmin><ymin>1</ymin>'
            b"<xmax>500</xmax><ymax>50</ymax></bndbox></object>",
            "annotation_not_voc",
            "<bndbox> is in the XML namespace 'n'",
        ),
        (
            b"<objects><object><name>cat</name>" + BOX_XML + b"</object></objects>",
            "annotation_bad_object",
            "an <object> is inside <objects>, not <annotation>: VOC's objects are the root's "
            "children, and it would be passed over",
        ),
        (
            b"<object><name>cat</name><bndbox><xmin>10<b>0</b></xmin><ymin>1</ymin>"
            b"<xmax>500</xmax><ymax>50</ymax></bndbox></object>",
            "annotation_bad_coordinate",
            "object #0 (cat): <xmin> holds <b>: a value is text alone, not elements",
        ),
        (
            b"<object><name>c<i>a</i>t</name>" + BOX_XML + b"</object>",
            "annotation_bad_object",
            "object #0: <name> holds <i>: a value is text alone, not elements",
        ),
    ],
)
def test_tags_the_parser_would_pass_over_are_refused(body, reason, said):
    with pytest.raises(InputError) as error:
        parse_annotation(b"<annotation>" + body + b"</annotation>")
    assert error.value.reason == reason
    assert str(error.value).startswith(f"{reason}: {said}")


def test_parts_and_other_namespaces_are_still_read():
    # A person's <part> holds a <name> and a <bndbox> (VOC's layout task); a tool's own tags
    # in a namespace of their own are not VOC's.
    part = b"<part><name>hand</name>" + BOX_XML + b"</part>"
    xml = b'<annotation xmlns:t="http://tool"><t:extra>1</t:extra><object><name>cat</name>'
    xml += BOX_XML + part + b"</object></annotation>"
    (found,) = parse_annotation(xml).objects
    assert found.name == "cat" and found.box.xmax == 500


@pytest.mark.parametrize(
    "name", ["new&#10;line", "new\nline", "cr&#13;x", "tab\tname", "zz\u2028sep"]
)
def test_a_class_name_no_labels_file_can_hold_is_refused(name):
    # A line break in a class name made two lines of labels.txt and of TFDS's label file: TFDS
    # named every later class's records after the class before, exit 0 and verify OK.
    data = f"<annotation><object><name>{name}</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
    data += "<xmax>5</xmax><ymax>5</ymax></bndbox></object></annotation>"
    with pytest.raises(InputError) as error:
        parse_annotation(data.encode())
    assert error.value.reason == "annotation_bad_object"
    assert error.value.detail.endswith(
        "holds a line break, tab or control character, which no labels file can hold"
    )
    assert parse_annotation(data.replace(name, " traffic light ").encode()).objects[0].name == (
        "traffic light"
    )


@pytest.mark.parametrize(
    "name, reason",
    [
        ("xmlbomb.xml", "annotation_entities_forbidden"),
        ("xmlbomb2.xml", "annotation_entities_forbidden"),
        ("external.xml", "annotation_entities_forbidden"),
        ("external_file.xml", "annotation_entities_forbidden"),
        ("quadratic.xml", "annotation_malformed"),
        ("cyclic.xml", "annotation_malformed"),
        ("dtd.xml", "annotation_not_voc"),
    ],
)
def test_xml_attacks_are_refused(name, reason):
    with pytest.raises(InputError) as error:
        parse_annotation((CORPUS / "xml_attacks_defusedxml" / name).read_bytes())
    assert error.value.reason == reason


def test_external_entity_content_never_reaches_the_annotation(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    data = (
        f'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x SYSTEM "file://{secret}">]>'
        "<annotation><object><name>&x;</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
        "<xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>"
    ).encode()
    with pytest.raises(InputError) as error:
        parse_annotation(data)
    assert "TOP-SECRET" not in str(error.value)


def test_the_pose_of_each_object_is_read_as_written():
    # VOC2008's own XML: <pose> as VOC's annotators wrote it, capitalised.
    data = (CORPUS / "voc_xml/tzutalin_ImageNet_Utils/2008_004649.xml").read_bytes()
    assert [o.pose for o in parse_annotation(data).objects] == ["Frontal", "Frontal"]
    # TFDS's fake VOC XML writes them in lower case: kept so, as the OD API keeps them.
    data = (CORPUS / "voc_xml/tfds_fake_voc/VOC2007/000005.xml").read_bytes()
    assert [o.pose for o in parse_annotation(data).objects] == ["right", "unspecified"]


def test_an_object_without_a_pose_has_an_empty_one():
    # datumaro's cat says Unspecified; its person says nothing (nor does its <part>, a head).
    data = (CORPUS / "datumaro/voc_dataset/voc_dataset1/Annotations/2007_000001.xml").read_bytes()
    assert [(o.name, o.pose) for o in parse_annotation(data).objects] == [
        ("cat", "Unspecified"),
        ("person", ""),
    ]
    (dog,) = parse_annotation(voc_xml([("dog", 1, 2, 3, 4)]).encode()).objects
    assert dog.pose == ""  # ILSVRC DET and most exports write no <pose>


@pytest.mark.parametrize(
    "markup, pose",
    [
        ("<pose>\n    Left\t </pose>", "Left"),  # pretty-printed: the whitespace is layout
        ("<pose>REAR</pose>", "REAR"),  # the case as written, as the OD API writes it
        ("<pose>frontal</pose>", "frontal"),
        ("<pose>Frontal Left</pose>", "Frontal Left"),  # not VOC's, kept as written
        ("<pose/>", ""),
        ("<pose>   </pose>", ""),
        ("<pose>Left &amp; Right</pose>", "Left & Right"),
        ("<part><name>head</name><pose>Left</pose></part>", ""),  # a part's, not the object's
    ],
)
def test_odd_poses_are_read_as_written_without_surrounding_whitespace(markup, pose):
    data = (
        "<annotation><object><name>dog</name>"
        f"{markup}<bndbox><xmin>1</xmin><ymin>2</ymin><xmax>3</xmax><ymax>4</ymax></bndbox>"
        "</object></annotation>"
    )
    (dog,) = parse_annotation(data.encode()).objects
    assert dog.pose == pose


@pytest.mark.parametrize(
    "inside, markup, reason, detail",
    [
        ("<object>", "<name>cat</name>", "annotation_bad_object", "object #0: <object> holds 2"),
        ("<object>", "<pose>Left</pose>", "annotation_bad_object", "object #0 (dog): <object>"),
        ("<object>", "<difficult>1</difficult>", "annotation_bad_object", "object #0 (dog): "),
        ("<object>", BOX.replace("1", "0"), "annotation_bad_object", "object #0 (dog): "),
        ("<bndbox>", "<xmin>2</xmin>", "annotation_bad_coordinate", "object #0 (dog): <bndbox>"),
        ("<annotation>", "<size/>", "annotation_bad_size", "<annotation> holds 2 different"),
        ("<size>", "<width>8</width>", "annotation_bad_size", "<size> holds 2 different <width>"),
    ],
)
def test_a_tag_given_twice_with_two_values_is_refused_not_read_as_its_first(
    inside, markup, reason, detail
):
    # <name>dog</name><name>cat</name> in one object was labelled dog, silently.
    data = (
        "<annotation><size><width>9</width><height>9</height></size><object><name>dog</name>"
        f"<pose>Right</pose><difficult>0</difficult>{BOX}</object></annotation>"
    ).replace(inside, inside + markup, 1)
    with pytest.raises(InputError) as error:
        parse_annotation(data.encode())
    assert error.value.reason == reason
    assert error.value.detail.startswith(detail) and error.value.detail.endswith(
        "different <" + markup.split(">")[0].strip("<").rstrip("/") + ">: which is meant?"
    )


def test_a_tag_given_twice_with_one_value_is_one():
    # Scripts that add <difficult>0</difficult> to every object, or copy a <size> or a box;
    # copies that read alike (1 and 1.0, 0 and nothing, a <depth> more) are one.
    size = "<size><width>9</width><height>9</height></size>"
    box = BOX.replace("<xmin>1</xmin>", "<xmin>1.0</xmin>")
    data = (
        f"<annotation>{size}{size.replace('</size>', '<depth>3</depth></size>')}<object>"
        "<name>dog</name><difficult>0</difficult><difficult/><difficult> false </difficult>"
        f"<name> dog </name>{BOX}{box}</object></annotation>"
    )
    (dog,) = parse_annotation(data.encode()).objects
    assert (dog.name, dog.difficult, dog.box) == ("dog", False, Box(1, 2, 3, 4))


def test_voc_xml_writes_a_pose_only_when_given():
    assert "<pose>" not in voc_xml([("dog", 1, 2, 3, 4, 0, 1)])
    xml = voc_xml([("dog", 1, 2, 3, 4, 0, 1, "Left <&>"), ("cat", 1, 2, 3, 4, 1, 0, "")])
    dog, cat = parse_annotation(xml.encode()).objects
    assert (dog.pose, dog.truncated, cat.pose, cat.difficult) == ("Left <&>", True, "", True)
