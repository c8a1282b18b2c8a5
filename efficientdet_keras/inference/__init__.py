"""The Python Detector: a model directory, checkpoint, SavedModel, .tflite or .onnx in,
detections out."""
