"""The classes of a dataset as the model numbers them, and how they meet a config.

A model predicts class ids 1..num_classes (0 is background). Datasets number their classes
their own way: COCO JSON by category id (1-based in COCO itself, 0-based in some exports,
with a root category first in Roboflow's), YOLO by 0-based index into `names`, Pascal VOC
by name. `DataClasses` holds the model id, the name and the dataset's own id of each class,
so the mapping can be written beside a run and read back:

    classes = coco_classes(data["categories"], data["annotations"])
    classes.names        # {1: "cat", 2: "dog"}
    classes.data_ids     # {1: 0, 2: 1} for a 0-based export
    classes_into_config(config, classes, set_keys={"num_classes"})  # -> warnings
"""

import dataclasses
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from efficientdet_keras.config.label_maps import VOC_LABEL_MAP, label_names


@dataclasses.dataclass
class DataClasses:
    """Model id -> name and model id -> the dataset's id of each class of a dataset.

    dropped: a category of the data that is not a class (Roboflow's root), by name, or None;
    dropped_ids: the data's ids that carried that name.
    """
    names: Dict[int, str]
    data_ids: Dict[int, Any]
    dropped: Optional[str] = None
    dropped_ids: Tuple[int, ...] = ()

    @property
    def num_classes(self) -> int:
        """The head size these ids need: the largest model id (ids may leave gaps, as COCO's)."""
        return max(self.names) if self.names else 0

    def model_ids(self) -> Dict[Any, int]:
        """{the dataset's id: model id}."""
        return {data_id: model_id for model_id, data_id in self.data_ids.items()}

    def as_json(self, data_format: str) -> dict:
        """What a run folder keeps: the format, and each class's model id, name and data id."""
        return {"format": data_format, "num_classes": self.num_classes,
                "classes": [{"id": k, "name": self.names[k], "data_id": self.data_ids[k]}
                            for k in sorted(self.names)],
                **({"left_out": self.dropped} if self.dropped else {})}

    def renumbered(self, new_ids: Dict[int, int]) -> "DataClasses":
        """The same classes under new model ids ({old id: new id}, every id given)."""
        return DataClasses({new_ids[k]: name for k, name in self.names.items()},
                           {new_ids[k]: data_id for k, data_id in self.data_ids.items()},
                           self.dropped, self.dropped_ids)

    def describe(self, shown: int = 12) -> str:
        names = [self.names[k] for k in sorted(self.names)]
        text = ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")
        return "%d (%s)" % (len(names), text)


def coco_classes(categories: Sequence[dict], annotations: Sequence[dict] = ()) -> DataClasses:
    """The classes of a COCO JSON's categories.

    Ids of 1 and up are kept as they are (COCO's own 1..90 with gaps, CVAT's 1..K), so a
    released COCO head and a COCO ground-truth file keep their meaning. Roboflow's exports put
    a root category first (id 0, the dataset's name, the supercategory of every other one,
    never annotated): it is left out, and so is a category that repeats its name without boxes
    of its own. When a real class has id 0 (0-based exports such as
    Label Studio's), every id moves up by one.

    Raises:
      ValueError for a category without an integer id or a name, or an id that appears twice.
    """
    by_id: Dict[int, str] = {}
    supercategories = {}
    for category in categories:
        try:
            category_id = int(category["id"])
            if category_id != category["id"] and str(category_id) != str(category["id"]):
                raise ValueError
            name = str(category["name"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("category %r needs an integer id and a name" % (category,)) from None
        if category_id in by_id:
            raise ValueError("category id %d appears twice (%r and %r)"
                             % (category_id, by_id[category_id], name))
        if category_id < 0:
            raise ValueError("category %r has a negative id" % (category,))
        by_id[category_id] = name
        supercategories[category_id] = category.get("supercategory")
    dropped, dropped_ids = None, ()
    if 0 in by_id and _is_root_category(0, by_id, supercategories, annotations):
        dropped = by_id[0]
        dropped_ids = tuple(k for k in sorted(by_id) if by_id[k] == dropped and (
            k == 0 or not any(isinstance(a, dict) and _same_id(a.get("category_id"), k)
                              for a in annotations)))
        for k in dropped_ids:
            del by_id[k]
    shift = 1 if 0 in by_id else 0
    return DataClasses({k + shift: v for k, v in sorted(by_id.items())},
                       {k + shift: k for k in sorted(by_id)}, dropped, dropped_ids)


def _is_root_category(category_id: int, by_id: Dict[int, str], supercategories: dict,
                      annotations: Sequence[dict]) -> bool:
    """Roboflow's root: the others' supercategory (at least one), and no box of its own."""
    name = by_id[category_id]
    children = [k for k, parent in supercategories.items() if k != category_id and parent == name]
    if not children:
        return False
    return not any(isinstance(a, dict) and _same_id(a.get("category_id"), category_id)
                   for a in annotations)


def annotated_root(categories: Sequence[dict], annotations: Sequence[dict]):
    """(name, boxes) of a category that is every other category's supercategory, as
    Roboflow's root is, but that boxes use (so it is kept as a class); None otherwise."""
    valid = [c for c in categories if isinstance(c, dict) and "id" in c and "name" in c]
    for category in valid:
        others = [c for c in valid if c is not category]
        if not others or any(c.get("supercategory") != category["name"] for c in others):
            continue
        boxes = sum(1 for a in annotations if isinstance(a, dict)
                    and _same_id(a.get("category_id"), _as_int(category["id"])))
        if boxes:
            return str(category["name"]), boxes
    return None


def _as_int(value) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _same_id(value, category_id: int) -> bool:
    try:
        return int(value) == category_id
    except (TypeError, ValueError):
        return False


def indexed_classes(names: Sequence[str]) -> DataClasses:
    """The classes of a 0-based name list (YOLO's `names`): index i is model id i + 1."""
    return DataClasses({i + 1: str(name) for i, name in enumerate(names)},
                       {i + 1: i for i in range(len(names))})


def named_classes(names: Iterable[str]) -> DataClasses:
    """The classes of data that names its objects (Pascal VOC XML): the 20 VOC ids when every
    name is a VOC class (so VOC data meets VOC-trained models), else 1..K in sorted order."""
    names = sorted(set(names))
    voc_ids = {name: k for k, name in VOC_LABEL_MAP.items()}
    if names and all(name in voc_ids for name in names):
        return DataClasses(dict(VOC_LABEL_MAP), {k: name for k, name in VOC_LABEL_MAP.items()})
    return DataClasses({i + 1: name for i, name in enumerate(names)},
                       {i + 1: name for i, name in enumerate(names)})


def ids_matched_by_name(classes: DataClasses, model_names: Dict[int, str]) -> Dict[int, int]:
    """{the data's model id: the model's id} for a dataset whose class names are all among a
    model's (in another order, or a subset): what makes the data score against the model's
    ids. Empty when the ids already agree, or when a name of the data is not the model's
    (`classes_into_config` then names the difference)."""
    by_name = {name: k for k, name in model_names.items()}
    if len(by_name) != len(model_names) or not all(n in by_name for n in classes.names.values()):
        return {}
    ids = {k: by_name[name] for k, name in classes.names.items()}
    return {} if all(k == v for k, v in ids.items()) else ids


def classes_into_config(config, classes: DataClasses, set_keys: Iterable[str] = ()) -> List[str]:
    """Gives `config` the data's num_classes and label_map where the user did not set them.

    Args:
      set_keys: the config keys the user set (in a YAML file or --hparams); their values stay.

    Returns:
      One warning line per disagreement between a key the user set and the data: names that
      differ, or a head with more classes than the data has.

    Raises:
      ValueError: the data has class ids beyond a num_classes the user set (their boxes
        would be dropped from every image).
    """
    set_keys = set(set_keys)
    warnings = []
    if "num_classes" not in set_keys:
        config.num_classes = classes.num_classes
    elif classes.num_classes > config.num_classes:
        beyond = [classes.names[k] for k in sorted(classes.names) if k > config.num_classes]
        raise ValueError("the data has %d class ids but num_classes is %d: the boxes of %s would "
                         "be dropped; raise num_classes or leave it unset to take the data's"
                         % (classes.num_classes, config.num_classes, ", ".join(beyond[:5])))
    elif classes.num_classes < config.num_classes:
        warnings.append("num_classes is %d but the data has %d class ids: the head predicts "
                        "classes the data never shows" % (config.num_classes, classes.num_classes))
    if "label_map" not in set_keys or config.label_map is None:
        config.label_map = dict(classes.names)
    else:
        given = label_names(config.label_map) or {}
        differing = ["%d: %r in the config, %r in the data" % (k, given.get(k), name)
                     for k, name in sorted(classes.names.items()) if given.get(k) != name]
        if differing:
            warnings.append("label_map differs from the data's classes (%s%s); the config's "
                            "names are used" % ("; ".join(differing[:3]),
                                                "; ..." if len(differing) > 3 else ""))
    return warnings
