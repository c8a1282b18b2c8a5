"""Runs efficientdet-eval from a checkout: python tools/eval.py --model_dir=... --val_file_pattern=..."""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.eval import run

if __name__ == "__main__":
    run()
