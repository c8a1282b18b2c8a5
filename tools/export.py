"""Runs efficientdet-export from a checkout: python tools/export.py --model_dir=... --export_dir=..."""

import _checkout  # noqa: F401  (puts this checkout first on sys.path)
from efficientdet_keras.cli.export import run

if __name__ == "__main__":
    run()
