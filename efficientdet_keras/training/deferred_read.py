"""DeferredFlagReader: a step's flag read one step later, without the host waiting in between.

`fit` queues a step on the device and goes on before the device has done it. Reading one of
the step's results on the host then waits for the device, which idles until the host has
queued the next step: a pause after every step. A read one step late avoids that only if it
does not also wait for the step queued meanwhile, and a device copies a tensor to the host
after the work queued before the copy. So the read of a flag in device memory starts right
away, on a thread of its own (TensorFlow lets go of Python's lock while it copies), behind the
step that made the flag, and its value is taken at the end of the next step, when it has long
been there. A flag in host memory (a CPU run, whose steps end before `fit` goes on) is there
already and is read when its value is asked for.
"""

import concurrent.futures
import functools
from typing import Callable, Optional

import tensorflow as tf


@functools.lru_cache(maxsize=None)
def _is_host_device(device: str) -> bool:
    return not device or tf.DeviceSpec.from_string(device).device_type == "CPU"


class DeferredFlagReader:
    """Reads scalar flags (bool or count tensors, or numbers) one call late, without waiting
    for the device in between.

    Each `exchange(flag)` starts reading `flag` and returns whether the flag of the call
    before was set, so a flag taken at the end of step k is known at the end of step k + 1,
    whatever the device: a decision made on it comes at the same step on every worker and
    in every run.
    """

    def __init__(self):
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pending: Optional[Callable[[], bool]] = None

    def exchange(self, flag) -> bool:
        """Starts reading `flag`; returns whether the flag given to the call before was set
        (False after `forget` or at the first call), waiting for its read if not done."""
        previous, self._pending = self._pending, self._start_reading(flag)
        return previous is not None and previous()

    def forget(self) -> None:
        """Drops the flag given last, unread (a new fit or epoch: a check has read past it)."""
        self._pending = None

    def _start_reading(self, flag) -> Callable[[], bool]:
        if _is_host_device(getattr(flag, "device", "")):
            return functools.partial(bool, flag)
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="deferred-flag-read")
        return self._executor.submit(bool, flag).result
