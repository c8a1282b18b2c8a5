"""Runs efficientdet-gpu-check from a checkout: python tools/gpu_check.py --settings=float32"""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.gpu_check import run

if __name__ == "__main__":
    run()
