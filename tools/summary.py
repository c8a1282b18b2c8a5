"""Runs efficientdet-summary from a checkout: python tools/summary.py --model_name=..."""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.summary import run

if __name__ == "__main__":
    run()
