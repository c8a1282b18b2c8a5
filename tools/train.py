"""Runs efficientdet-train from a checkout: python tools/train.py --demo"""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.train import run

if __name__ == "__main__":
    run()
