"""Modules of the package's optional extras, imported when first needed.

    onnxruntime = import_extra("onnxruntime", "running an .onnx file", "onnx")

A missing extra is one MissingExtraError line naming what needed it, the import error and the
install command.
"""

import importlib
from typing import Optional


class MissingExtraError(ImportError, ValueError):
    """An optional extra is not installed (a ValueError too, so the tools print its one line
    without a stack trace)."""


def install_command(extra: str) -> str:
    """The pip command that installs the package's `extra`."""
    return 'pip install "efficientdet_keras[%s]"' % extra


def import_extra(module: str, needed_for: str, extra: str, distribution: Optional[str] = None):
    """The imported `module`, or MissingExtraError("<needed_for> needs <distribution>
    (<error>): <install_command(extra)>"); distribution is the pip name (default: the
    module's top package)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError("%s needs %s (%s): %s" % (
            needed_for, distribution or module.split(".")[0], e,
            install_command(extra))) from None
