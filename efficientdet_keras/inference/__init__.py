"""The Python Detector: a model directory, checkpoint, SavedModel or .tflite in, detections out."""
