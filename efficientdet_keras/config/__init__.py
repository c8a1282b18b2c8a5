"""Configuration: the Config object, the EfficientDet model family, and overrides.

A Config is a nested mapping with attribute access. Every model starts from
`default_config()` plus its row of the family table; users then change it with
`override()`, which accepts a dict, a "k=v,k2.sub=v2" string or a YAML file path,
and rejects keys that do not exist.

  keys/                     the key table: one row per key (default, type, check, meaning)
  container.py              the Config class, YAML save and load
  overrides.py              override strings, scalars, image sizes, YAML and hparams files
  literals.py               values written as YAML and override strings write them
  rules.py                  the rows' checks applied, value kinds, validate_config
  optimization_settings.py  model_optimizations (prune, quantize) settings and checks
  defaults.py, family.py    the shared defaults (from keys/) and the D0-D7x, Lite0-Lite4 presets
  label_maps.py             the built-in label maps (coco, voc, waymo)
  precision.py              the mixed-precision policy (imports TensorFlow)

Importing this package does not import TensorFlow.
"""

from efficientdet_keras.config.container import Config, config_differences
from efficientdet_keras.config.family import MODEL_NAMES, default_config, get_efficientdet_config
from efficientdet_keras.config.keys.choices import ACTIVATIONS, GRAPPLER_PASSES
from efficientdet_keras.config.overrides import (PACKAGED_HPARAMS_DIR, parse_override_string,
                                                 parse_scalar)
from efficientdet_keras.config.rules import validate_config

__all__ = ["ACTIVATIONS", "Config", "GRAPPLER_PASSES", "MODEL_NAMES", "PACKAGED_HPARAMS_DIR",
           "config_differences", "default_config", "get_efficientdet_config",
           "parse_override_string", "parse_scalar", "validate_config"]
