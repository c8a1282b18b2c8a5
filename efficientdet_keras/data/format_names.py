"""The title of each dataset format `open_dataset` finds, by its name in `Dataset.format`:
what describe() and the tools' --data help call it. Light to import: --help loads no
TensorFlow."""

FORMAT_NAMES = {"yolo": "YOLO", "roboflow": "COCO JSON (Roboflow layout)",
                "voc": "Pascal VOC", "coco": "COCO JSON", "tfrecord": "TFRecord",
                "labelme": "LabelMe JSON", "csv": "CSV (TensorFlow Object Detection)",
                "cvat": "CVAT for images XML", "automl_csv": "CSV (AutoML Vision)",
                "open_images": "Open Images CSV", "kitti": "KITTI",
                "label_studio": "Label Studio JSON", "createml": "CreateML JSON",
                "via": "VIA JSON"}
