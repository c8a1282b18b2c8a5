"""Writes one COCO dataset in every bounding-box layout that supervision, datumaro, globox,
labelme, labelformat, Label Studio, FiftyOne and pylabel write, with each library's own writer, for the held test
of `open_dataset`.

Run it with the writers' environment (tests/writers/requirements.txt), not the package's:

    .venv-writers/bin/python tests/writers/write_layouts.py SOURCE OUT [--only NAME,...]

SOURCE is a COCO folder: SOURCE/annotations/instances_{train,val}.json with the images in
SOURCE/train/ and SOURCE/val/. Each library loads SOURCE with its own COCO importer and each
export goes to OUT/<library>-<layout>/ (emptied first). Where a library writes only the
annotations, this script copies the images and adds the file a user must add (a class list,
a data.yaml), as the notes at each writer say.

Prints one JSON object on stdout, {"<library>-<layout>": {"ok": true} | {"ok": false,
"error": "..."}}; an export that is not available here (a library not installed, datumaro's
tf_detection_api without TensorFlow) also has "skipped": true. One failing export does not
stop the others; the exit code is 0 unless the arguments are wrong. Libraries' own output
(progress bars, warnings) goes to stderr. --only keeps the exports whose name starts with one
of the given prefixes (e.g. --only datumaro-voc,globox).
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import traceback
import warnings

SPLITS = ("train", "val")
# Roboflow's split folder names, as Roboflow exports and supervision's docs read them.
ROBOFLOW_SPLITS = {"train": "train", "val": "valid"}

# Every datumaro exporter that writes the boxes (datumaro's format names). Left out: dota (it
# writes only polygons: empty label files), vgg_face2 (one box per image, fails), the COCO
# keypoints/captions/labels/panoptic/stuff tasks and the segmentation, classification and
# point-cloud formats. vott_csv / vott_json have importers only.
DATUMARO_FORMATS = (
    "coco", "coco_instances",
    "voc", "voc_detection", "voc_layout", "voc_action", "voc_instance_segmentation",
    "yolo", "yolo_ultralytics",
    "cvat", "datumaro", "datumaro_binary", "arrow",
    "open_images", "label_me", "kitti", "kitti_detection",
    "mot_seq_gt", "wider_face", "ava", "icdar_text_localization", "mvtec_detection",
    "tf_detection_api",  # registered only where TensorFlow is installed
)


class Skipped(Exception):
    """An export that cannot run in this environment (reported with "skipped": true)."""


def coco_paths(source, split):
    """(annotations JSON, images folder) of a SOURCE split."""
    return (os.path.join(source, "annotations", "instances_%s.json" % split),
            os.path.join(source, split))


def read_coco(source, split):
    with open(coco_paths(source, split)[0]) as f:
        return json.load(f)


def class_names(source):
    """The classes in category id order (the order every writer below numbers them)."""
    categories = read_coco(source, SPLITS[0])["categories"]
    return [c["name"] for c in sorted(categories, key=lambda c: c["id"])]


def copy_images(source, split, folder):
    os.makedirs(folder, exist_ok=True)
    for image in read_coco(source, split)["images"]:
        shutil.copy2(os.path.join(coco_paths(source, split)[1], image["file_name"]),
                     os.path.join(folder, os.path.basename(image["file_name"])))


# supervision: one DetectionDataset per split, written in Roboflow's export layouts
# (train/ and valid/ folders), as Roboflow's downloads and supervision's docs have them.

def supervision_exports(source):
    import supervision as sv

    def load(split):
        annotations, images = coco_paths(source, split)
        return sv.DetectionDataset.from_coco(images_directory_path=images,
                                             annotations_path=annotations)

    def coco(out):  # {train,valid}/_annotations.coco.json beside the images
        for split in SPLITS:
            folder = os.path.join(out, ROBOFLOW_SPLITS[split])
            load(split).as_coco(images_directory_path=folder,
                                annotations_path=os.path.join(folder, "_annotations.coco.json"))

    def pascal_voc(out):  # {train,valid}/*.xml beside the images
        for split in SPLITS:
            folder = os.path.join(out, ROBOFLOW_SPLITS[split])
            load(split).as_pascal_voc(images_directory_path=folder,
                                      annotations_directory_path=folder)

    def yolo(out):  # {train,valid}/images, {train,valid}/labels and data.yaml (nc, names)
        for split in SPLITS:
            folder = os.path.join(out, ROBOFLOW_SPLITS[split])
            load(split).as_yolo(images_directory_path=os.path.join(folder, "images"),
                                annotations_directory_path=os.path.join(folder, "labels"),
                                data_yaml_path=os.path.join(out, "data.yaml"))

    def labelme(out):  # {train,valid}/*.json beside the images
        for split in SPLITS:
            folder = os.path.join(out, ROBOFLOW_SPLITS[split])
            load(split).as_labelme(images_directory_path=folder,
                                   annotations_directory_path=folder)

    def createml(out):  # {train,valid}/_annotations.createml.json beside the images
        for split in SPLITS:
            folder = os.path.join(out, ROBOFLOW_SPLITS[split])
            load(split).as_createml(
                images_directory_path=folder,
                annotations_path=os.path.join(folder, "_annotations.createml.json"))

    return {"coco": coco, "pascal_voc": pascal_voc, "yolo": yolo, "labelme": labelme,
            "createml": createml}


# datumaro (CVAT's export engine): the whole dataset, both subsets, imported with datumaro's
# importer for this very layout (mmdet_coco: annotations/instances_<subset>.json with the
# images in <subset>/; its coco_instances importer wants them in images/<subset>/).

def datumaro_exports(source):
    from datumaro.components.dataset import Dataset
    from datumaro.components.environment import Environment

    available = set(Environment().exporters)
    dataset = []

    def loaded():
        if not dataset:
            dataset.append(Dataset.import_from(source, "mmdet_coco"))
        return dataset[0]

    def exporter(name):
        def export(out):
            if name not in available:
                raise Skipped("datumaro has no %r exporter here%s" % (
                    name, ": it needs TensorFlow" if name == "tf_detection_api" else ""))
            loaded().export(out, name, save_media=True)
        return export

    return {name: exporter(name) for name in DATUMARO_FORMATS}


# globox: one AnnotationSet per split from AnnotationSet.from_coco; globox writes annotations
# only, so the images are copied where each layout has them.

def globox_exports(source):
    from globox import AnnotationSet

    names = class_names(source)
    label_to_id = {name: index for index, name in enumerate(names)}

    def load(split):
        return AnnotationSet.from_coco(coco_paths(source, split)[0])

    def coco(out):  # annotations/instances_{train,val}.json, images in {train,val}/
        os.makedirs(os.path.join(out, "annotations"))
        for split in SPLITS:
            load(split).save_coco(os.path.join(out, "annotations", "instances_%s.json" % split))
            copy_images(source, split, os.path.join(out, split))

    def pascal_voc(out):  # {train,val}/*.xml beside the images (save_pascal_voc = save_xml)
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_pascal_voc(folder)

    def yolo_darknet(out):  # {train,val}/*.txt beside the images; classes.txt (this script's)
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_yolo_darknet(folder, label_to_id=label_to_id)
        with open(os.path.join(out, "classes.txt"), "w") as f:
            f.write("".join(name + "\n" for name in names))

    def yolo_darknet_bare(out):  # the same as globox writes it: no file names the classes
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_yolo_darknet(folder, label_to_id=label_to_id)

    def yolo_v5(out):  # images/{train,val}, labels/{train,val}; data.yaml (this script's)
        for split in SPLITS:
            copy_images(source, split, os.path.join(out, "images", split))
            os.makedirs(os.path.join(out, "labels"), exist_ok=True)
            load(split).save_yolo_v5(os.path.join(out, "labels", split), label_to_id=label_to_id)
        with open(os.path.join(out, "data.yaml"), "w") as f:
            f.write("path: .\ntrain: images/train\nval: images/val\nnames:\n")
            f.write("".join("  %d: %s\n" % (i, name) for i, name in enumerate(names)))

    def labelme(out):  # {train,val}/*.json beside the images
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_labelme(folder)

    def cvat(out):  # annotations/{train,val}.xml, images/{train,val}/ (datumaro's places)
        os.makedirs(os.path.join(out, "annotations"))
        for split in SPLITS:
            copy_images(source, split, os.path.join(out, "images", split))
            load(split).save_cvat(os.path.join(out, "annotations", split + ".xml"))

    def cvat_beside(out):  # {train,val}/annotations.xml beside the images
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_cvat(os.path.join(folder, "annotations.xml"))

    def openimage(out):  # annotations/{train,val}-annotations-bbox.csv, images/{train,val}/
        os.makedirs(os.path.join(out, "annotations"))
        for split in SPLITS:
            copy_images(source, split, os.path.join(out, "images", split))
            load(split).save_openimage(
                os.path.join(out, "annotations", split + "-annotations-bbox.csv"))

    def via_json(out):  # {train,val}/via_region_data.json beside the images
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_via_json(os.path.join(folder, "via_region_data.json"),
                                      image_folder=folder)

    def txt(out):  # {train,val}/*.txt beside the images: "<name> xmin ymin xmax ymax" pixels
        for split in SPLITS:
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            load(split).save_txt(folder)

    return {"coco": coco, "pascal_voc": pascal_voc, "yolo_darknet": yolo_darknet,
            "yolo_darknet_bare": yolo_darknet_bare, "yolo_v5": yolo_v5, "labelme": labelme,
            "cvat": cvat, "cvat_beside": cvat_beside, "openimage": openimage,
            "via_json": via_json, "txt": txt}


# labelme: the shapes built from the COCO JSON (one rectangle per box, as labelme's app saves
# a rectangle: its two corners) and written with labelme's own LabelFile.save, the JSON
# beside its image in {train,val}/. "json" is labelme's default (imageData null);
# "json_imagedata" embeds the image as labelme --with-image-data (and labelme 5's default).

def labelme_exports(source):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from labelme import LabelFile
    except ImportError:  # labelme < 5.5
        from labelme.label_file import LabelFile

    def write(out, with_image_data):
        for split in SPLITS:
            coco = read_coco(source, split)
            names = {c["id"]: c["name"] for c in coco["categories"]}
            folder = os.path.join(out, split)
            copy_images(source, split, folder)
            for image in coco["images"]:
                file_name = os.path.basename(image["file_name"])
                shapes = [{"label": names[a["category_id"]],
                           "points": [[float(a["bbox"][0]), float(a["bbox"][1])],
                                      [float(a["bbox"][0] + a["bbox"][2]),
                                       float(a["bbox"][1] + a["bbox"][3])]],
                           "group_id": None, "description": "", "shape_type": "rectangle",
                           "flags": {}, "mask": None}
                          for a in coco["annotations"] if a["image_id"] == image["id"]]
                image_data = None
                if with_image_data:
                    with open(os.path.join(folder, file_name), "rb") as f:
                        image_data = f.read()
                # Positional: labelme 6 names these image_path, image_height, ...; 5 imagePath.
                LabelFile().save(os.path.join(folder, os.path.splitext(file_name)[0] + ".json"),
                                 shapes, file_name, image["height"], image["width"], image_data,
                                 {}, {})

    return {"json": lambda out: write(out, False),
            "json_imagedata": lambda out: write(out, True)}


# labelformat: its CLI (`labelformat convert`), from the source's COCO files. It writes the
# labels only; the images are copied into images/, where a user puts them. Its YOLO writer
# numbers the classes by their COCO ids (names: {1: widget, 2: gadget}) and names one split
# per run in data.yaml, so each of its folders holds one split, the source's train split (YOLO:
# val, an evaluation set). yolov8 stands for the YOLO versions, which share its writer class;
# rtdetr for COCO's, which share the COCO writer.

def labelformat_exports(source):
    import subprocess
    import labelformat  # noqa: F401 - not installed: every export is reported as skipped
    command = os.path.join(os.path.dirname(sys.executable), "labelformat")

    def convert(split, output_format, *output):
        subprocess.run([command, "convert", "--task", "object-detection", "--input-format",
                        "coco", "--input-file", coco_paths(source, split)[0], "--output-format",
                        output_format] + list(output), check=True, stdout=sys.stderr)

    def coco(out):  # {train,val}.json, images/ (both splits)
        for split in SPLITS:
            convert(split, "coco", "--output-file", os.path.join(out, split + ".json"))
            copy_images(source, split, os.path.join(out, "images"))

    def pascalvoc(out):  # labels/*.xml, images/
        convert("train", "pascalvoc", "--output-folder", os.path.join(out, "labels"))
        copy_images(source, "train", os.path.join(out, "images"))

    def yolov8(out):  # data.yaml (val: images), labels/*.txt, images/
        convert("val", "yolov8", "--output-file", os.path.join(out, "data.yaml"),
                "--output-split", "val")
        copy_images(source, "val", os.path.join(out, "images"))

    def cvat(out):  # annotations XML in the folder, images/
        convert("train", "cvat", "--output-folder", out)
        copy_images(source, "train", os.path.join(out, "images"))

    def kitti(out):  # labels/*.txt with the class names, images/
        convert("train", "kitti", "--output-folder", os.path.join(out, "labels"))
        copy_images(source, "train", os.path.join(out, "images"))

    def lightly(out):  # Lightly's JSON per image, images/
        convert("train", "lightly", "--output-folder", os.path.join(out, "detection-task"))
        copy_images(source, "train", os.path.join(out, "images"))

    return {"coco": coco, "pascalvoc": pascalvoc, "yolov8": yolov8, "cvat": cvat,
            "kitti": kitti, "lightly": lightly}


# Label Studio: the export of one project (the source's train split) as Label Studio's server
# writes it: its own JSON (what "Export" gives: rectangles in percent of the image) and, by its
# converter (label_studio_sdk.converter, the code behind the other export formats), COCO, VOC,
# YOLO, CSV and JSON-MIN, each with the project's images in images/. The images were imported
# from local storage on the labelling machine, whose folder is not on this one.

LABEL_STUDIO_STORAGE = "/label-studio/storage"


def label_studio_exports(source):
    from label_studio_sdk.converter import Converter

    coco = read_coco(source, "train")
    names = {c["id"]: c["name"] for c in coco["categories"]}
    tasks = []
    for image in coco["images"]:
        width, height = image["width"], image["height"]
        results = [{"id": str(a["id"]), "type": "rectanglelabels", "from_name": "label",
                    "to_name": "image", "original_width": width, "original_height": height,
                    "image_rotation": 0,
                    "value": {"x": 100.0 * a["bbox"][0] / width, "y": 100.0 * a["bbox"][1] / height,
                              "width": 100.0 * a["bbox"][2] / width,
                              "height": 100.0 * a["bbox"][3] / height, "rotation": 0,
                              "rectanglelabels": [names[a["category_id"]]]}}
                   for a in coco["annotations"] if a["image_id"] == image["id"]]
        tasks.append({"id": image["id"],
                      "data": {"image": "/data/local-files/?d=train/" + image["file_name"]},
                      "annotations": [{"id": image["id"], "result": results}]})
    config = ('<View><Image name="image" value="$image"/><RectangleLabels name="label" '
              'toName="image">%s</RectangleLabels></View>'
              % "".join('<Label value="%s"/>' % name for name in names.values()))
    os.environ["LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT"] = LABEL_STUDIO_STORAGE

    def export(converter_format):
        def write(out):
            os.makedirs(out)
            tasks_file = os.path.join(out, "tasks.json")
            with open(tasks_file, "w") as f:
                json.dump(tasks, f)
            if converter_format:
                Converter(config=config, project_dir=out).convert(
                    tasks_file, out, converter_format, is_dir=False)
                os.remove(tasks_file)
            copy_images(source, "train", os.path.join(out, "images"))
        return write

    return {"json": export(None), "coco": export("COCO"), "voc": export("VOC"),
            "yolo": export("YOLO"), "csv": export("CSV"), "json_min": export("JSON_MIN")}


# FiftyOne: its dataset exporters, the classes `Dataset.export` runs, given the samples of the
# source's train split (YOLOv5: val, as its plain export of one split writes only that key).
# They run without FiftyOne's database, which its installer downloads (no network here).

def fiftyone_exports(source):
    os.environ.setdefault("FIFTYONE_DO_NOT_TRACK", "true")
    import fiftyone as fo
    import fiftyone.utils.coco as fouc
    import fiftyone.utils.kitti as fouk
    import fiftyone.utils.tf as fout
    import fiftyone.utils.voc as fouv
    import fiftyone.utils.yolo as fouy

    names = class_names(source)

    def write(exporter, split):
        coco = read_coco(source, split)
        by_id = {c["id"]: c["name"] for c in coco["categories"]}
        with exporter:
            for image in coco["images"]:
                width, height = image["width"], image["height"]
                detections = [fo.Detection(label=by_id[a["category_id"]], bounding_box=[
                    a["bbox"][0] / width, a["bbox"][1] / height, a["bbox"][2] / width,
                    a["bbox"][3] / height]) for a in coco["annotations"]
                    if a["image_id"] == image["id"]]
                exporter.export_sample(
                    os.path.join(coco_paths(source, split)[1], image["file_name"]),
                    fo.Detections(detections=detections),
                    metadata=fo.ImageMetadata(width=width, height=height))

    return {  # labels.json and data/; labels/*.xml and data/; dataset.yaml, images/, labels/
        "coco": lambda out: write(fouc.COCODetectionDatasetExporter(out, classes=names),
                                  "train"),
        "voc": lambda out: write(fouv.VOCDetectionDatasetExporter(out), "train"),
        "yolov5": lambda out: write(fouy.YOLOv5DatasetExporter(out, split="val",
                                                               classes=names), "val"),
        "kitti": lambda out: write(fouk.KITTIDetectionDatasetExporter(out), "train"),
        # tf.records: class/label from 0 in the classes' order, names in class/text.
        "tfrecords": lambda out: write(fout.TFObjectDetectionDatasetExporter(out, classes=names),
                                       "train"),
    }


# pylabel: a COCO split loaded by its importer and written by its exporters, the images
# copied beside the annotations as its examples lay them out (VOC XMLs and images in folders
# of their own; YOLOv5's dataset.yaml with labels/ and images/, which it copies itself).
def pylabel_exports(source):
    from pylabel import importer

    def load(split):
        json_file, images = coco_paths(source, split)
        return importer.ImportCoco(json_file, path_to_images=os.path.relpath(
            images, os.path.dirname(json_file)), name="widgets")

    def voc(out):  # annotations/*.xml, images/
        load("train").export.ExportToVoc(output_path=os.path.join(out, "annotations"))
        copy_images(source, "train", os.path.join(out, "images"))

    def yolov5(out):  # dataset.yaml, labels/, images/ (copied by the exporter)
        load("train").export.ExportToYoloV5(output_path=os.path.join(out, "labels"),
                                            yaml_file="dataset.yaml", copy_images=True,
                                            cat_id_index=0)

    def coco(out):  # annotations.json, images/
        os.makedirs(out)
        load("train").export.ExportToCoco(output_path=os.path.join(out, "annotations.json"))
        copy_images(source, "train", os.path.join(out, "images"))

    return {"voc": voc, "yolov5": yolov5, "coco": coco}


LIBRARIES = (
    ("supervision", supervision_exports,
     ("coco", "pascal_voc", "yolo", "labelme", "createml")),
    ("datumaro", datumaro_exports, DATUMARO_FORMATS),
    ("globox", globox_exports,
     ("coco", "pascal_voc", "yolo_darknet", "yolo_darknet_bare", "yolo_v5", "labelme", "cvat",
      "cvat_beside", "openimage", "via_json", "txt")),
    ("labelme", labelme_exports, ("json", "json_imagedata")),
    ("labelformat", labelformat_exports,
     ("coco", "pascalvoc", "yolov8", "cvat", "kitti", "lightly")),
    ("label_studio", label_studio_exports, ("json", "coco", "voc", "yolo", "csv", "json_min")),
    ("fiftyone", fiftyone_exports, ("coco", "voc", "yolov5", "kitti", "tfrecords")),
    ("pylabel", pylabel_exports, ("voc", "yolov5", "coco")),
)


def error_text(error):
    return ("%s: %s" % (type(error).__name__, error)).strip()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="COCO folder: annotations/instances_{train,val}.json")
    parser.add_argument("out", help="folder to write OUT/<library>-<layout>/ into")
    parser.add_argument("--only", default="",
                        help="comma-separated prefixes of the exports to run")
    args = parser.parse_args(argv)
    for split in SPLITS:
        for path in coco_paths(args.source, split):
            if not os.path.exists(path):
                parser.error("%s is missing" % path)
    source = os.path.abspath(args.source)
    only = tuple(p for p in args.only.split(",") if p)
    os.makedirs(args.out, exist_ok=True)

    results = {}
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for library, make_exports, layouts in LIBRARIES:
            names = ["%s-%s" % (library, layout) for layout in layouts]
            names = [n for n in names if not only or n.startswith(only)]
            if not names:
                continue
            try:
                exports = make_exports(source)
            except ImportError as e:
                for name in names:
                    results[name] = {"ok": False, "skipped": True,
                                     "error": "%s is not installed here (%s)" % (
                                         library, error_text(e))}
                continue
            for layout in layouts:
                name = "%s-%s" % (library, layout)
                if name not in names:
                    continue
                out = os.path.join(args.out, name)
                shutil.rmtree(out, ignore_errors=True)
                try:
                    exports[layout](out)
                    results[name] = {"ok": True}
                except Skipped as e:
                    shutil.rmtree(out, ignore_errors=True)
                    results[name] = {"ok": False, "skipped": True, "error": str(e)}
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    traceback.print_exc(file=sys.stderr)
                    results[name] = {"ok": False, "error": error_text(e)}
    json.dump(results, stdout, indent=1, sort_keys=False)
    stdout.write("\n")
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
