"""CreateML JSON (Apple's Create ML; Roboflow's and supervision's `createml`): a list of
{"image", "annotations"} with centre, width and height in pixels, a file per split."""

from efficientdet_keras.data.layouts.json_exports import find_exports, read_exports
from efficientdet_keras.data.layouts.row import Layout


LAYOUT = Layout(
    name="createml", data_format="createml", title="CreateML JSON",
    writers="CreateML JSON (Apple's Create ML; Roboflow's and supervision's `createml`)",
    recognised="a `.json` per split holding a list of `{\"image\", \"annotations\"}` (centre, "
               "width and height in pixels), in split folders or in the folder",
    splits="the folder names, else the file names (one file alone is train)",
    sign="CreateML JSON",
    find=lambda path: find_exports(path, "createml"),
    read=lambda found, options: read_exports(found, "createml", LAYOUT.title))
