"""Runs efficientdet-infer from a checkout: python tools/infer.py --saved_model_dir=... --input=..."""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.infer import run

if __name__ == "__main__":
    run()
