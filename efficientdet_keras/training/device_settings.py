"""The training settings that change which kernels a step runs on an accelerator.

Each `DeviceSetting` is a set of config overrides, a replica layout and a trainer. The
suite traces the train, test and predict functions of every setting and checks that each
op has a GPU kernel (and an XLA one where XLA compiles it); `efficientdet-gpu-check` runs
each setting a machine supports for a few steps and times it.
"""

import dataclasses
from typing import Dict, Tuple

ONE_DEVICE = "one device"
MIRRORED = "mirrored"


@dataclasses.dataclass(frozen=True)
class DeviceSetting:
    """name: how tables and test ids call it; overrides: config keys it sets; replicas:
    ONE_DEVICE or MIRRORED (MirroredStrategy over the local GPUs); hub: the TF-Hub
    fine-tuning trainer (EfficientDetNetTrainHub) instead of EfficientDetNetTrain."""
    name: str
    overrides: Dict[str, object]
    replicas: str = ONE_DEVICE
    hub: bool = False

    @property
    def uses_xla(self) -> bool:
        return bool(self.overrides.get("jit_compile"))

    @property
    def precision(self) -> str:
        return {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}.get(
            self.overrides.get("mixed_precision"), "float32")


def _precisions_and_xla(replicas: str, **overrides) -> Tuple[DeviceSetting, ...]:
    prefix = "" if replicas == ONE_DEVICE else replicas + " "
    settings = []
    for precision in (False, "float16", "bfloat16"):
        for xla in (False, True):
            name = prefix + {False: "float32", "float16": "mixed_float16",
                             "bfloat16": "mixed_bfloat16"}[precision] + (" XLA" if xla else "")
            settings.append(DeviceSetting(name, dict(overrides, mixed_precision=precision,
                                                     jit_compile=xla), replicas))
    return tuple(settings)


# The EMA is on in every setting (the config's default). Under MirroredStrategy BatchNorm is
# synchronised across replicas (sync_batch_norm's default there).
SETTINGS = (
    _precisions_and_xla(ONE_DEVICE)
    + _precisions_and_xla(MIRRORED)
    + (DeviceSetting("gradient checkpointing", {"grad_checkpoint": True}),
       DeviceSetting("gradient checkpointing mixed_float16 XLA",
                     {"grad_checkpoint": True, "mixed_precision": "float16",
                      "jit_compile": True}),
       DeviceSetting("hub trainer", {}, hub=True),
       DeviceSetting("hub trainer mixed_float16 XLA",
                     {"mixed_precision": "float16", "jit_compile": True}, hub=True))
)


def setting_named(name: str) -> DeviceSetting:
    for setting in SETTINGS:
        if setting.name == name:
            return setting
    raise ValueError("no device setting %r; the settings are: %s"
                     % (name, ", ".join(s.name for s in SETTINGS)))
