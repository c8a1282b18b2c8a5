"""How much memory the machine can still give, for refusing work that cannot fit before it
starts (rather than being killed by the kernel part-way)."""

import os
from typing import Optional


def available_memory_bytes() -> Optional[int]:
    """Memory available to new allocations without swapping (Linux's MemAvailable, else free
    physical pages), or None where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
