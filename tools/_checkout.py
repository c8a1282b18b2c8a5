"""Makes the package in this checkout importable when a tool runs as `python tools/X.py`."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
