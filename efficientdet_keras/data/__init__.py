"""Input data: readers (TFRecord, COCO JSON, Pascal VOC), decoding, augmentation, pipelines."""
