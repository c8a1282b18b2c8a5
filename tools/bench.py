"""Runs efficientdet-bench from a checkout: python tools/bench.py --model=runs/demo"""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.bench import run

if __name__ == "__main__":
    run()
