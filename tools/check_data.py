"""Runs efficientdet-check-data from a checkout: python tools/check_data.py ..."""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.check_data import run

if __name__ == "__main__":
    run()
