"""COCO evaluation of an exported .tflite: a FileEvaluation (file_evaluation.py) whose
interpreter runs the pipeline's letterboxed images one by one (the file's batch is 1)."""

from efficientdet_keras.evaluation.file_evaluation import FileEvaluation, file_detect_fns
from efficientdet_keras.inference.tflite_runner import TFLiteRunner


def tflite_detect_fns(runner: TFLiteRunner):
    """`file_detect_fns` of a .tflite: the interpreter runs image by image (batch 1)."""
    return file_detect_fns(runner, lambda images: [runner.run(image) for image in images])


class TFLiteEvaluation(FileEvaluation):
    """The evaluation of a .tflite file (a TFLiteRunner); see FileEvaluation."""

    def detect_fns(self):
        return tflite_detect_fns(self.runner)
