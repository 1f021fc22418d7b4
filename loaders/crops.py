"""Training crop windows drawn as `tf.image.sample_distorted_bounding_box` draws them (the same
distribution, not the same draws), in plain Python for DALI's pipeline."""

from __future__ import annotations

import random

import numpy as np

from loaders.config import ReadConfig

_F32 = np.float32


def main_boxes(ymins, xmins, ymaxs, xmaxs, classes=None, labels=None):
    """Per image of a batch: its largest box as [[ymin, xmin, ymax, xmax]] (the first of
    equals, as `loaders.preprocessing.main_object_box`), or the whole image without boxes.
    With the objects' `classes` and the images' `labels`, the largest of the label's boxes
    where it has some (`loaders.preprocessing.labelled_boxes`)."""
    boxes = []
    for index, (ymin, xmin, ymax, xmax) in enumerate(zip(ymins, xmins, ymaxs, xmaxs, strict=True)):
        if ymin.size == 0:
            boxes.append(np.array([[0.0, 0.0, 1.0, 1.0]], np.float32))
            continue
        areas = (ymax - ymin) * (xmax - xmin)
        if classes is not None and labels is not None:
            mine = np.asarray(classes[index]).ravel() == np.asarray(labels[index]).ravel()[0]
            if mine.any():
                areas = np.where(mine, areas, np.float32(-1))
        i = int(np.argmax(areas))
        boxes.append(np.array([[ymin[i], xmin[i], ymax[i], xmax[i]]], np.float32))
    return boxes


def central_windows(shapes, fraction: float):
    """Per image of a batch of [H, W, C] shapes: the (anchor, size) of `load_dataset`'s
    central crop window ([top, left], [height, width]; `jpeg_scale.central_window`)."""
    anchors, sizes = [], []
    for shape in shapes:
        side = np.asarray(shape[:2], np.float64)
        start = np.floor((side - side * fraction) / 2)
        anchors.append(start.astype(np.float32))
        sizes.append((side - 2 * start).astype(np.float32))
    return anchors, sizes


def crop_windows(
    shapes,
    ymins,
    xmins,
    ymaxs,
    xmaxs,
    classes=None,
    labels=None,
    *,
    rng: random.Random,
    config: ReadConfig,
):
    """Per image of a batch: `load_dataset`'s training crop window, [top, left] and [height,
    width] in pixels, and the main box it was drawn for ([[ymin, xmin, ymax, xmax]], relative).

    The algorithm of `tf.image.sample_distorted_bounding_box` (TensorFlow's
    `sample_distorted_bounding_box_op.cc`), which `load_dataset` uses, with `rng` for its
    random numbers: up to 10 attempts, each an aspect ratio from
    `config.crop_aspect_ratio_range` and a height that gives an area in
    `config.crop_area_range`, kept when the window holds at least `config.min_object_covered`
    of the main box (`main_boxes`: of the label's boxes, given `classes` and `labels`; the
    whole image for an image without boxes); the whole image when no attempt does. The same
    distribution as `load_dataset`'s, not the same draws."""
    anchors, sizes = [], []
    boxes = main_boxes(ymins, xmins, ymaxs, xmaxs, classes, labels)
    for shape, box in zip(shapes, boxes, strict=True):
        height, width = int(shape[0]), int(shape[1])
        top, left, crop_height, crop_width = _crop_window(height, width, box[0], rng, config)
        anchors.append(np.array([top, left], np.float32))
        sizes.append(np.array([crop_height, crop_width], np.float32))
    return anchors, sizes, boxes


def _crop_window(height: int, width: int, box, rng: random.Random, config: ReadConfig):
    """(top, left, height, width) of one image's crop, as TensorFlow's kernel draws it: its
    float32 arithmetic and rounding (lrintf: half to even), its order of draws."""
    ymin, xmin, ymax, xmax = (_F32(value) for value in box)
    # The box in whole pixels, truncated from float32 products, as the kernel takes it.
    box_left, box_right = int(xmin * _F32(width)), int(xmax * _F32(width))
    box_top, box_bottom = int(ymin * _F32(height)), int(ymax * _F32(height))
    box_area = _F32((box_right - box_left) * (box_bottom - box_top))
    low_aspect, high_aspect = (_F32(value) for value in config.crop_aspect_ratio_range)
    low_area, high_area = (_F32(value) for value in config.crop_area_range)
    covered_enough = _F32(config.min_object_covered)
    for _ in range(10):
        aspect = _F32(rng.random()) * (high_aspect - low_aspect) + low_aspect
        window = _random_crop(height, width, low_area, high_area, aspect, rng)
        if window is None or box_area < 1:  # the kernel skips a box of no pixel
            continue
        top, left, crop_height, crop_width = window
        across = min(left + crop_width, box_right) - max(left, box_left)
        down = min(top + crop_height, box_bottom) - max(top, box_top)
        covered = across * down if across >= 0 and down >= 0 else 0
        if _F32(covered) / box_area >= covered_enough:
            return window
    return 0, 0, height, width


def _random_crop(height, width, low_area, high_area, aspect, rng):
    """TensorFlow's `GenerateRandomCrop`: a window of this aspect ratio and an area in
    [low_area, high_area] of the image, at a random place; None when none fits."""
    if high_area <= 0 or aspect <= 0 or low_area > high_area:
        return None
    min_area = low_area * _F32(width) * _F32(height)
    max_area = high_area * _F32(width) * _F32(height)
    crop_height = int(np.rint(np.sqrt(min_area / aspect)))
    max_height = int(np.rint(np.sqrt(max_area / aspect)))
    if np.rint(_F32(max_height) * aspect) > width:
        max_height = int((width + 0.5 - float(_F32(1e-7))) / float(aspect))
        if np.rint(_F32(max_height) * aspect) > width:
            max_height -= 1
    max_height = min(max_height, height)
    crop_height = min(crop_height, max_height)
    if crop_height < max_height:
        crop_height += rng.randrange(max_height - crop_height + 1)
    crop_width = int(np.rint(_F32(crop_height) * aspect))
    if _F32(crop_width * crop_height) < min_area:  # rounding: one pixel taller first
        crop_height += 1
        crop_width = int(np.rint(_F32(crop_height) * aspect))
    if _F32(crop_width * crop_height) > max_area:  # then one shorter
        crop_height -= 1
        crop_width = int(np.rint(_F32(crop_height) * aspect))
    area = _F32(crop_width * crop_height)
    if area < min_area or area > max_area or crop_width > width or crop_height > height:
        return None
    if crop_width <= 0 or crop_height <= 0:
        return None
    top = rng.randrange(height - crop_height) if crop_height < height else 0
    left = rng.randrange(width - crop_width) if crop_width < width else 0
    return top, left, crop_height, crop_width
