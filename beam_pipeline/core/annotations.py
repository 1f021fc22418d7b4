"""Pascal VOC / ILSVRC annotation XML → `Annotation`, safely; and the one writer of such XML.

ILSVRC (DET and CLS-LOC) uses the Pascal VOC XML format, so one parser serves every layout.
Parsing never resolves entities, loads a DTD or touches the network, and a document that
declares entities is refused outright (billion laughs, quadratic blow-up, XXE). Only the
size and each object's class, box, flags and pose are read; `<filename>`, `<folder>` and
`<path>` are ignored on purpose (they lie, and may hold `%s` or `../`): images are paired by
their relative path. An object's `<pose>` (VOC's view: Frontal, Left, Rear, Right,
Unspecified) is kept as its text, as the OD API's `create_pascal_tf_record` writes it to
`image/object/view`; empty when the object has none (the OD API's script stops there instead).

`voc_xml` writes the same format; the sample tree, the benchmark trees and the tests all use it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from xml.sax.saxutils import escape

from lxml import etree

from beam_pipeline.core.rejections import InputError

_parsers = threading.local()
# Control characters (tab, newline, CR, ...) and Unicode's line and paragraph separators.
_LINE_OR_CONTROL = frozenset({"Cc", "Zl", "Zp"})
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


@dataclasses.dataclass(frozen=True)
class Box:
    """A bounding box in the annotation's pixel coordinates."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float


@dataclasses.dataclass(frozen=True)
class AnnotatedObject:
    """One `<object>`. `pose` is its `<pose>` as written (case kept, surrounding whitespace
    dropped), or empty when it has none (ILSVRC DET, most exports)."""

    name: str
    box: Box
    difficult: bool
    truncated: bool
    pose: str = ""


@dataclasses.dataclass(frozen=True)
class Annotation:
    """One parsed XML file. `width`/`height` are None when `<size>` is absent or zero (the
    labelling step fills in the image file's size where the main object depends on it)."""

    width: int | None
    height: int | None
    objects: tuple[AnnotatedObject, ...]


def _parser() -> etree.XMLParser:
    # lxml parsers are not thread-safe; DirectRunner runs DoFns on several threads.
    parser = getattr(_parsers, "parser", None)
    if parser is None:
        parser = etree.XMLParser(
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            dtd_validation=False,
            huge_tree=False,
            remove_comments=True,
            remove_pis=True,
        )
        _parsers.parser = parser
    return parser


def parse_annotation(data: bytes) -> Annotation:
    """Parses one VOC-style annotation.

    Raises:
      InputError: with reasons `annotation_empty`, `annotation_malformed`,
        `annotation_entities_forbidden`, `annotation_not_voc`, `annotation_bad_object`,
        `annotation_bad_coordinate`, `annotation_degenerate_box`.
    """
    if not data.strip():
        raise InputError("annotation_empty", "the annotation file is empty")
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as error:
        raise InputError("annotation_malformed", str(error)) from None
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise InputError("annotation_entities_forbidden", "the document declares XML entities")
    if root.tag != "annotation":
        raise InputError("annotation_not_voc", f"root element is <{root.tag}>, not <annotation>")
    _refuse_hidden_tags(root, data)
    width, height = _parse_size(root)
    objects = tuple(_parse_object(node, i) for i, node in enumerate(root.findall("object")))
    return Annotation(width=width, height=height, objects=objects)


# The tags the parser reads: one of them in a namespace, or an <object> anywhere but under the
# root, would be passed over (its object lost without a word).
_VOC_TAGS = frozenset(("object", "name", "bndbox", "size", "width", "height", "pose"))
_VOC_TAGS |= {"xmin", "ymin", "xmax", "ymax", "difficult", "truncated"}


def _refuse_hidden_tags(root: etree._Element, data: bytes) -> None:
    """InputError for a VOC tag the parser's plain-name lookups would pass over: one in a
    namespace (`<v:object xmlns:v=...>`, or one declaring a default namespace), or an
    <object> wrapped in another element (`<objects><object>`), whose object would be lost.
    A namespace needs its `xmlns` declared: without one, only the <object>s are looked at."""
    for element in root.iter() if b"xmlns" in data else root.iter("object"):
        tag = element.tag
        if not isinstance(tag, str):
            continue  # (an entity: refused where it is read)
        local = tag.rpartition("}")[2]
        if local in _VOC_TAGS and tag != local:
            raise InputError(
                "annotation_not_voc",
                f"<{local}> is in the XML namespace {tag[1 : tag.index('}')]!r}: VOC's tags have "
                "none, and it would be passed over",
            )
        if tag == "object" and element.getparent() is not root:
            raise InputError(
                "annotation_bad_object",
                f"an <object> is inside <{element.getparent().tag}>, not <annotation>: VOC's "
                "objects are the root's children, and it would be passed over",
            )


def _text(
    node: etree._Element, tag: str, reason: str = "annotation_bad_object", where: str = ""
) -> str | None:
    """The stripped text of `node`'s child `tag` (`_one`), or None."""
    child = _one(node, tag, reason, where)
    if child is None:
        return None
    if len(child) and any(isinstance(part, etree._Entity) for part in child):
        raise InputError("annotation_entities_forbidden", f"<{tag}> holds an entity reference")
    if len(child):  # (`<xmin>10<b>0</b></xmin>` read as 10, `<name>c<i>a</i>t</name>` as c)
        at = f"{where}: " if where else ""
        raise InputError(
            reason, f"{at}<{tag}> holds <{child[0].tag}>: a value is text alone, not elements"
        )
    return (child.text or "").strip()


def _one(node: etree._Element, tag: str, reason: str, where: str = "") -> etree._Element | None:
    """`node`'s child `tag`, or None. Copies that say the same are one (scripts that add
    <difficult>0</difficult> to every object); InputError `reason` where they differ: which
    is meant cannot be told (the first was taken, silently)."""
    children = list(node.iterchildren(tag))  # (findall: the same, slower)
    if len(children) > 1 and len({_said(child) for child in children}) > 1:
        at = f"{where}: " if where else ""
        raise InputError(
            reason, f"{at}<{node.tag}> holds {len(children)} different <{tag}>: which is meant?"
        )
    return children[0] if children else None


# The parts of a tag the parser reads: two copies that read alike are one (a <size> with a
# <depth> and one without, <xmin>1</xmin> and <xmin>1.0</xmin>, <difficult/> and 0).
_READ = {"size": ("width", "height"), "bndbox": ("xmin", "ymin", "xmax", "ymax")}


def _said(element: etree._Element) -> tuple:
    tag = str(element.tag)
    if tag in _READ:
        return tuple(_value(element.findtext(part), part) for part in _READ[tag])
    return (_value(element.text, tag),)


def _value(text: str | None, tag: str):
    text = (text or "").strip()
    number = float(text) if _NUMBER.fullmatch(text) else None
    if tag in ("difficult", "truncated"):  # as `_flag` reads them
        return (
            False
            if not text
            else _BOOLEANS.get(text.lower(), text if number is None else number != 0)
        )
    return text if number is None else number


def _parse_size(root: etree._Element) -> tuple[int | None, int | None]:
    size = _one(root, "size", "annotation_bad_size")
    if size is None:
        return None, None
    values = []
    for tag in ("width", "height"):
        text = _text(size, tag, "annotation_bad_size")
        # A decimal number, as a coordinate is (float() would take "4_0" and "٤٠" too).
        value = (float(text) if _NUMBER.fullmatch(text) else math.nan) if text else 0.0
        if not math.isfinite(value) or value < 0 or value != int(value):
            raise InputError("annotation_bad_size", f"<size><{tag}> is {text!r}")
        values.append(int(value) or None)
    if values[0] is None or values[1] is None:
        return None, None
    return values[0], values[1]


def _parse_object(node: etree._Element, index: int) -> AnnotatedObject:
    where = f"object #{index}"
    name = _text(node, "name", where=where)
    if not name:
        raise InputError("annotation_bad_object", f"{where} has no <name>")
    if any(unicodedata.category(char) in _LINE_OR_CONTROL for char in name):
        # A class is one line of labels.txt and of TFDS's label files: `new\nline` made two,
        # and every later class's name moved to the next label.
        raise InputError(
            "annotation_bad_object",
            f"{where}: <name> {name!r} holds a line break, tab or control character, which "
            "no labels file can hold",
        )
    # Only the object's own <bndbox>: a <part><bndbox> belongs to a body part, not the object.
    bndbox = _one(node, "bndbox", "annotation_bad_object", f"{where} ({name})")
    if bndbox is None:
        raise InputError("annotation_bad_object", f"{where} ({name}) has no <bndbox>")
    coords = {}
    for tag in ("xmin", "ymin", "xmax", "ymax"):
        text = _text(bndbox, tag, "annotation_bad_coordinate", f"{where} ({name})")
        # A decimal number, as annotation tools write it: float() alone would also take
        # "1_0", "nan" and "infinity".
        value = float(text) if text and _NUMBER.fullmatch(text) else math.nan
        if not math.isfinite(value):
            raise InputError("annotation_bad_coordinate", f"{where} ({name}): <{tag}> is {text!r}")
        coords[tag] = value
    box = Box(**coords)
    if box.xmax <= box.xmin or box.ymax <= box.ymin:
        raise InputError(
            "annotation_degenerate_box",
            f"{where} ({name}): box {coords} has min >= max",
        )
    return AnnotatedObject(
        name=name,
        box=box,
        difficult=_flag(node, "difficult", f"{where} ({name})"),
        truncated=_flag(node, "truncated", f"{where} ({name})"),
        pose=_text(node, "pose", where=f"{where} ({name})") or "",
    )


def _flag(node: etree._Element, tag: str, where: str) -> bool:
    text = _text(node, tag, where=where)
    if not text:
        return False
    if text.lower() in _BOOLEANS:  # some converters write Python's True/False
        return _BOOLEANS[text.lower()]
    # (float() would take "nan", "1_0" and "١"); a 2 or a -1 is no VOC flag: which was meant?
    if not _NUMBER.fullmatch(text) or float(text) not in (0, 1):
        raise InputError("annotation_bad_object", f"{where}: <{tag}> is {text!r}, not 0 or 1")
    return float(text) == 1


_BOOLEANS = {"true": True, "false": False}
# What `voc_xml` writes for an object's difficult, truncated and pose not given (no <pose>).
_OBJECT_DEFAULTS: list[object] = [0, 0, None]


def voc_xml(
    objects: Iterable[Sequence] = (),
    size: tuple[int, int] | None = None,
    *,
    folder: str = "",
    filename: str = "",
    extra: str = "",
) -> str:
    """A Pascal VOC annotation document, as `parse_annotation` reads it.

    Args:
      objects: (name, xmin, ymin, xmax, ymax[, difficult, truncated[, pose]]) each.
        Coordinates and flags are written as given (so a test can write a malformed one);
        flags default to 0; `<pose>` is written only when a pose is given (escaped).
      size: (width, height) for `<size>`, or None to leave it out.
      folder, filename: written as given (escaped); the parser ignores both.
      extra: markup appended inside `<annotation>`, as is.
    """
    parts = [
        f"<annotation><folder>{escape(folder)}</folder><filename>{escape(filename)}</filename>"
    ]
    if size is not None:
        parts.append(
            f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>"
        )
    for name, xmin, ymin, xmax, ymax, *given in objects:
        difficult, truncated, pose = given + _OBJECT_DEFAULTS[len(given) :]
        pose_tag = "" if pose is None else f"<pose>{escape(str(pose))}</pose>"
        parts.append(
            f"<object><name>{escape(str(name))}</name>{pose_tag}<difficult>{difficult}</difficult>"
            f"<truncated>{truncated}</truncated><bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin>"
            f"<xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox></object>"
        )
    parts.append(f"{extra}</annotation>\n")
    return "".join(parts)
