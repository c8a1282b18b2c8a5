"""Small datasets in the layouts labelling tools export, for the tests of `--data`.

Each writer puts the same two classes ("widget", "gadget") in its own numbering, with one
box per image (a white rectangle on black, so a model can learn it) and returns the
ground truth as {image file name: [(name, [ymin, xmin, ymax, xmax] pixels)]}.
"""

import json
import os

import numpy as np
import yaml
from PIL import Image

NAMES = ("widget", "gadget")
HEIGHT, WIDTH = 48, 64


def _image(folder, name, index):
    """Writes a JPEG with one white box; returns its box [ymin, xmin, ymax, xmax] in pixels."""
    os.makedirs(folder, exist_ok=True)
    top, left = 4 + 3 * (index % 4), 6 + 5 * (index % 3)
    box = [top, left, top + 20, left + 24 + 4 * (index % 2)]
    pixels = np.zeros([HEIGHT, WIDTH, 3], np.uint8)
    pixels[box[0]:box[2], box[1]:box[3]] = 255
    Image.fromarray(pixels).save(os.path.join(folder, name), quality=95)
    return box


def _plan(count):
    """(file name, class index 0/1) of each image of a split."""
    return [("img%02d.jpg" % i, i % 2) for i in range(count)]


def write_coco_json(path, image_folder, count, category_ids, extra_categories=()):
    """A COCO instances JSON for `count` images written into image_folder; category_ids maps
    class index 0/1 to the file's category id."""
    images, annotations, truth = [], [], {}
    for i, (name, cls) in enumerate(_plan(count)):
        box = _image(image_folder, name, i)
        images.append({"id": i + 1, "file_name": name, "height": HEIGHT, "width": WIDTH})
        annotations.append({"id": i + 1, "image_id": i + 1, "category_id": category_ids[cls],
                            "bbox": [box[1], box[0], box[3] - box[1], box[2] - box[0]],
                            "area": (box[3] - box[1]) * (box[2] - box[0]), "iscrowd": 0})
        truth[name] = [(NAMES[cls], box)]
    categories = list(extra_categories) + [
        {"id": category_ids[k], "name": NAMES[k], "supercategory": "things"} for k in (0, 1)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return truth


def write_coco_folder(root, train=8, val=4, category_ids=(1, 2)):
    """root/annotations/instances_{train,val}.json with images in root/train/, root/val/."""
    return {split: write_coco_json(os.path.join(root, "annotations", "instances_%s.json" % split),
                                   os.path.join(root, split), count, category_ids)
            for split, count in (("train", train), ("val", val))}


def write_roboflow(root, train=8, valid=4):
    """Roboflow's COCO export: train/ valid/ folders with _annotations.coco.json beside the
    images, and its root category first (id 0, the dataset's name, never annotated)."""
    project = "widgets-xyz"
    root_category = [{"id": 0, "name": project, "supercategory": "none"}]
    truth = {}
    for split, count in (("train", train), ("valid", valid)):
        folder = os.path.join(root, split)
        truth[split] = write_coco_json(os.path.join(folder, "_annotations.coco.json"), folder,
                                       count, (1, 2), root_category)
        with open(os.path.join(folder, "_annotations.coco.json")) as f:
            data = json.load(f)
        for category in data["categories"][1:]:
            category["supercategory"] = project
        with open(os.path.join(folder, "_annotations.coco.json"), "w") as f:
            json.dump(data, f)
    return truth


def write_yolo(root, train=8, val=4):
    """An Ultralytics dataset: data.yaml, images/{train,val}/ and labels/{train,val}/ with
    one `class cx cy w h` line per box (0-based classes, normalised coordinates)."""
    truth = {}
    for split, count in (("train", train), ("val", val)):
        labels = os.path.join(root, "labels", split)
        os.makedirs(labels, exist_ok=True)
        truth[split] = {}
        for i, (name, cls) in enumerate(_plan(count)):
            box = _image(os.path.join(root, "images", split), name, i)
            ymin, xmin, ymax, xmax = box
            with open(os.path.join(labels, name.replace(".jpg", ".txt")), "w") as f:
                f.write("%d %.6f %.6f %.6f %.6f\n" % (
                    cls, (xmin + xmax) / 2 / WIDTH, (ymin + ymax) / 2 / HEIGHT,
                    (xmax - xmin) / WIDTH, (ymax - ymin) / HEIGHT))
            truth[split][name] = [(NAMES[cls], box)]
    with open(os.path.join(root, "data.yaml"), "w") as f:
        yaml.safe_dump({"path": ".", "train": "images/train", "val": "images/val",
                        "nc": len(NAMES), "names": list(NAMES)}, f)
    return truth


def write_voc(root, train=8, val=4, names=NAMES):
    """A VOC year folder: Annotations/, JPEGImages/, ImageSets/Main/{train,val}.txt (VOC
    boxes are 1-based inclusive pixels)."""
    truth = {}
    main = os.path.join(root, "ImageSets", "Main")
    os.makedirs(main, exist_ok=True)
    os.makedirs(os.path.join(root, "Annotations"), exist_ok=True)
    for split, count in (("train", train), ("val", val)):
        ids = []
        truth[split] = {}
        for i, (name, cls) in enumerate(_plan(count)):
            image_id = "%s_%02d" % (split, i)
            box = _image(os.path.join(root, "JPEGImages"), image_id + ".jpg", i)
            ymin, xmin, ymax, xmax = box
            with open(os.path.join(root, "Annotations", image_id + ".xml"), "w") as f:
                f.write("<annotation><size><width>%d</width><height>%d</height></size>"
                        "<object><name>%s</name><difficult>0</difficult><bndbox><xmin>%d</xmin>"
                        "<ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>"
                        "</annotation>" % (WIDTH, HEIGHT, names[cls], xmin + 1, ymin + 1,
                                           xmax, ymax))
            ids.append(image_id)
            truth[split][image_id + ".jpg"] = [(names[cls], box)]
        with open(os.path.join(main, split + ".txt"), "w") as f:
            f.write("\n".join(ids) + "\n")
    return truth


def write_labelme(root, train=8, val=4):
    """LabelMe's layout: train/ and valid/, each image with its JSON beside it (rectangles for
    widgets, four-point polygons for gadgets)."""
    truth = {}
    for split, count in (("train", train), ("valid", val)):
        folder = os.path.join(root, split)
        truth[split] = {}
        for i, (name, cls) in enumerate(_plan(count)):
            ymin, xmin, ymax, xmax = box = _image(folder, name, i)
            if cls == 0:
                shape = {"label": NAMES[cls], "shape_type": "rectangle",
                         "points": [[xmax, ymax], [xmin, ymin]]}
            else:
                shape = {"label": NAMES[cls], "shape_type": "polygon",
                         "points": [[xmin, ymin], [xmax, ymin], [xmax, ymax], [xmin, ymax]]}
            with open(os.path.join(folder, name.replace(".jpg", ".json")), "w") as f:
                json.dump({"version": "5.4.1", "flags": {}, "shapes": [shape],
                           "imagePath": name, "imageData": None,
                           "imageHeight": HEIGHT, "imageWidth": WIDTH}, f)
            truth[split][name] = [(NAMES[cls], box)]
    return truth


def write_box_csv(root, train=8, val=4):
    """Roboflow's "Tensorflow Object Detection CSV" export: train/ and valid/, each with
    _annotations.csv (filename,width,height,class,xmin,ymin,xmax,ymax) beside its images."""
    truth = {}
    for split, count in (("train", train), ("valid", val)):
        folder = os.path.join(root, split)
        truth[split] = {}
        rows = ["filename,width,height,class,xmin,ymin,xmax,ymax"]
        for i, (name, cls) in enumerate(_plan(count)):
            ymin, xmin, ymax, xmax = box = _image(folder, name, i)
            rows.append("%s,%d,%d,%s,%d,%d,%d,%d" % (name, WIDTH, HEIGHT, NAMES[cls],
                                                    xmin, ymin, xmax, ymax))
            truth[split][name] = [(NAMES[cls], box)]
        with open(os.path.join(folder, "_annotations.csv"), "w") as f:
            f.write("\n".join(rows) + "\n")
    return truth


def write_cvat_xml(root, train=8, val=4):
    """CVAT's "CVAT for images 1.1" export of a project: annotations.xml with the labels in
    <meta> (gadget declared first) and each image's subset, images in images/<subset>/;
    widgets as boxes, gadgets as polygons."""
    truth, images = {}, []
    for subset, count in (("Train", train), ("Validation", val)):
        truth[subset] = {}
        for i, (name, cls) in enumerate(_plan(count)):
            ymin, xmin, ymax, xmax = box = _image(os.path.join(root, "images", subset), name, i)
            if cls == 0:
                shape = '<box label="widget" occluded="0" xtl="%.2f" ytl="%.2f" xbr="%.2f" ' \
                    'ybr="%.2f" z_order="0"></box>' % (xmin, ymin, xmax, ymax)
            else:
                shape = '<polygon label="gadget" occluded="0" points="%.2f,%.2f;%.2f,%.2f;' \
                    '%.2f,%.2f" z_order="0"></polygon>' % (xmin, ymin, xmax, ymax, xmin, ymax)
            images.append('<image id="%d" name="%s" subset="%s" width="%d" height="%d">%s'
                          '</image>' % (len(images), name, subset, WIDTH, HEIGHT, shape))
            truth[subset][name] = [(NAMES[cls], box)]
    labels = "".join("<label><name>%s</name><color>#aa0000</color><type>any</type>"
                     "<attributes></attributes></label>" % n for n in ("gadget", "widget"))
    with open(os.path.join(root, "annotations.xml"), "w") as f:
        f.write('<?xml version="1.0" encoding="utf-8"?>\n<annotations><version>1.1</version>'
                '<meta><project><id>3</id><name>widgets</name><labels>%s</labels></project>'
                '</meta>%s</annotations>' % (labels, "".join(images)))
    return truth


def write_automl_csv(root, train=8, val=4):
    """AutoML Vision's CSV: one file, no header, the split first, images named by gs://
    addresses (found here by their path below the bucket), boxes as fractions: widgets by
    two corners, gadgets by four vertices; a TEST image without boxes."""
    truth, rows = {}, []
    for split, count in (("TRAIN", train), ("VALIDATION", val)):
        truth[split] = {}
        for i, (name, cls) in enumerate(_plan(count)):
            ymin, xmin, ymax, xmax = box = _image(os.path.join(root, "images", split.lower()),
                                                  name, i)
            x1, y1, x2, y2 = xmin / WIDTH, ymin / HEIGHT, xmax / WIDTH, ymax / HEIGHT
            address = "gs://widgets-bucket/images/%s/%s" % (split.lower(), name)
            if cls == 0:
                rows.append("%s,%s,widget,%.6f,%.6f,,,%.6f,%.6f,," % (split, address, x1, y1,
                                                                     x2, y2))
            else:
                rows.append("%s,%s,gadget,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f" % (
                    split, address, x1, y1, x2, y1, x2, y2, x1, y2))
            truth[split][name] = [(NAMES[cls], box)]
    _image(os.path.join(root, "images", "test"), "empty.jpg", 0)
    rows.append("TEST,gs://widgets-bucket/images/test/empty.jpg,,,,,,,,,")
    truth["TEST"] = {"empty.jpg": []}
    with open(os.path.join(root, "widgets.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return truth


OPEN_IMAGES_IDS = {"widget": "/m/0w1dg3t", "gadget": "/m/0g4dg3t"}


def write_open_images(root, train=8, val=4):
    """Open Images' layout: train- and validation-annotations-bbox.csv, the header-less
    class-descriptions-boxable.csv, images <ImageID>.jpg in train/ and validation/; the last
    gadget of train is a group box (IsGroupOf)."""
    truth = {}
    with open(os.path.join(root, "class-descriptions-boxable.csv"), "w") as f:
        f.write("".join("%s,%s\n" % (label, name) for name, label in OPEN_IMAGES_IDS.items()))
    for split, count in (("train", train), ("validation", val)):
        truth[split] = {}
        rows = ["ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,"
                "IsTruncated,IsGroupOf,IsDepiction,IsInside"]
        for i, (name, cls) in enumerate(_plan(count)):
            image_id = "%s%04x" % (split[0], i)
            ymin, xmin, ymax, xmax = box = _image(os.path.join(root, split), image_id + ".jpg", i)
            group = int(split == "train" and i == count - 1)
            rows.append("%s,xclick,%s,1,%.6f,%.6f,%.6f,%.6f,0,0,%d,0,0" % (
                image_id, OPEN_IMAGES_IDS[NAMES[cls]], xmin / WIDTH, xmax / WIDTH,
                ymin / HEIGHT, ymax / HEIGHT, group))
            truth[split][image_id + ".jpg"] = [(NAMES[cls], box)]
        with open(os.path.join(root, "%s-annotations-bbox.csv" % split), "w") as f:
            f.write("\n".join(rows) + "\n")
    return truth


def _writer_source_boxes(index):
    """([x, y, w, h] pixels, class index) of the boxes of image `index` of the writers'
    source: boxes on the left and top edges, one on the right and bottom edges, and two
    boxes of either class in one image."""
    first = [0 if index % 4 == 0 else 3 + index, 0 if index % 4 == 1 else 2 + index % 5,
             20 + index % 3, 14 + index % 4]
    boxes = [(first, index % 2)]
    if index == 5:
        boxes.append(([44, 30, 20, 18], 0))
    elif index % 2 == 1:
        boxes.append(([34 + index % 5, 20 + index % 3, 22 - index % 5, 18 + index % 4], 0))
    return boxes


def write_writer_source(root, train=8, val=4):
    """The COCO folder the writer libraries read (tests/writers/write_layouts.py):
    annotations/instances_{train,val}.json (widget id 1, gadget id 2), images in train/, val/;
    returns the truth by split and file name."""
    truth, index = {}, 0
    for split, count in (("train", train), ("val", val)):
        images, annotations, truth[split] = [], [], {}
        os.makedirs(os.path.join(root, split), exist_ok=True)
        for k in range(count):
            name = "%s_%02d.jpg" % (split, k)
            pixels = np.zeros([HEIGHT, WIDTH, 3], np.uint8)
            pixels[..., 0] = 20 * (index % 10)
            boxes = _writer_source_boxes(index)
            for (x, y, w, h), cls in boxes:
                pixels[y:y + h, x:x + w] = (255, 255, 255) if cls == 0 else (255, 128, 0)
            Image.fromarray(pixels).save(os.path.join(root, split, name), quality=95)
            images.append({"id": k + 1, "file_name": name, "width": WIDTH, "height": HEIGHT})
            for (x, y, w, h), cls in boxes:
                annotations.append({"id": len(annotations) + 1, "image_id": k + 1,
                                    "category_id": cls + 1, "bbox": [x, y, w, h],
                                    "area": w * h, "iscrowd": 0, "segmentation": []})
            truth[split][name] = [(NAMES[cls], [y, x, y + h, x + w]) for (x, y, w, h), cls
                                  in boxes]
            index += 1
        os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
        with open(os.path.join(root, "annotations", "instances_%s.json" % split), "w") as f:
            json.dump({"info": {}, "licenses": [], "images": images, "annotations": annotations,
                       "categories": [{"id": k + 1, "name": n, "supercategory": "things"}
                                      for k, n in enumerate(NAMES)]}, f)
    return truth


def boxes_by_file(dataset, split):
    """{image file name: [(class name, box rounded to 3 decimals)]} of a dataset's split, as
    the writers above return their ground truth."""
    names = dataset.classes.names
    return {os.path.basename(r.path): [(names[int(c)], [round(float(v), 3) for v in box])
                                       for c, box in zip(r.classes, r.boxes)]
            for r in dataset.split(split).records}


def expected_boxes(truth):
    """A writer's ground truth of one split in the form of `boxes_by_file`."""
    return {name: [(cls, [float(v) for v in box]) for cls, box in boxes]
            for name, boxes in truth.items()}


def assert_splits_read_as(dataset, truth, folders=(("train", "train"), ("val", "val"))):
    """The dataset has these splits, each read box for box as the writer's folder of it."""
    assert list(dataset.splits) == [split for split, _ in folders]
    for split, folder in folders:
        assert boxes_by_file(dataset, split) == expected_boxes(truth[folder]), split
