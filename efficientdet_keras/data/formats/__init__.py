"""The dataset formats: reading COCO JSON, Pascal VOC, YOLO labels and TFRecords into
ImageRecords or raw examples, and the classes a dataset names."""
