"""Runs efficientdet-create-tfrecord from a checkout: python tools/create_tfrecord.py ..."""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.create_tfrecord import run

if __name__ == "__main__":
    run()
