"""Runs efficientdet-summary from a checkout: python tools/summary.py --model_name=..."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from efficientdet_keras.cli.summary import run  # noqa: E402

if __name__ == "__main__":
    run()
