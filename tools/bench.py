"""Runs efficientdet-bench from a checkout: python tools/bench.py --what=postprocess"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from efficientdet_keras.cli.bench import run  # noqa: E402

if __name__ == "__main__":
    run()
