"""The line of a TensorFlow error message that says what went wrong.

TensorFlow's messages start with where the op ran ("Graph execution error:", "Detected at
node ...", stacks); the tools report the first line after that, in one line.
"""

import re
from typing import Iterable, Optional

# TensorFlow error text that is context, not the cause: graph positions and stacks.
TF_CONTEXT_LINE = re.compile(r"^(Graph execution error:|Detected at node|<stack traces|"
                             r"Traceback \(most recent|File \"|\[\[|\^)")
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def first_cause_line(lines: Iterable[str]) -> Optional[str]:
    """The first non-empty line that is not context, without its {{function_node ...}}
    prefix; None when every line is context."""
    for line in lines:
        line = _FUNCTION_NODE.sub("", line.strip())
        if line and not TF_CONTEXT_LINE.match(line):
            return line
    return None
