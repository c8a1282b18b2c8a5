"""VIA JSON (the VGG Image Annotator's export or project; globox's `via_json`): entries of
{"filename", "regions"}, a file per split."""

from efficientdet_keras.data.layouts.json_exports import find_exports, read_exports
from efficientdet_keras.data.layouts.row import Layout


LAYOUT = Layout(
    name="via", data_format="via", title="VIA JSON",
    writers="VIA JSON (the VGG Image Annotator's export or project; globox's `via_json`)",
    recognised="a `.json` per split of `{\"filename\", \"regions\"}` entries: rectangles, "
               "polygons, circles and ellipses are boxes; a region's class is its one "
               "attribute, or the one named `label`, `class`, `name`, `category`, `type` or "
               "`label_id`",
    splits="the folder names, else the file names (one file alone is train)",
    sign="VIA JSON",
    find=lambda path: find_exports(path, "via"),
    read=lambda found, options: read_exports(found, "via", LAYOUT.title))
