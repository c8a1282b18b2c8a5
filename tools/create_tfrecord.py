"""Runs efficientdet-create-tfrecord from a checkout: python tools/create_tfrecord.py ..."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from efficientdet_keras.cli.create_tfrecord import run  # noqa: E402

if __name__ == "__main__":
    run()
