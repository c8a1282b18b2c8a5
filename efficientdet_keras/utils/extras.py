"""Modules of the package's optional extras, imported when first needed.

    onnxruntime = import_extra("onnxruntime", "running an .onnx file", ONNXMissingError,
                               'pip install "efficientdet_keras[onnx]"')

A missing extra is one line naming what needed it, the import error and the install command,
raised as the caller's error class (an ImportError and a ValueError, so the tools print it
without a stack trace).
"""

import importlib
from typing import Optional


def import_extra(module: str, needed_for: str, error_class, install_hint: str,
                 distribution: Optional[str] = None):
    """The imported `module`, or error_class("<needed_for> needs <distribution> (<error>):
    <install_hint>"); distribution is the pip name (default: the module's top package)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise error_class("%s needs %s (%s): %s" % (
            needed_for, distribution or module.split(".")[0], e, install_hint)) from None
