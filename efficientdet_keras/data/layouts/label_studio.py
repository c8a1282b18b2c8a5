"""Label Studio's JSON and JSON-MIN export (what its Export button gives): a list of tasks with
rectangle labels in percent of the image, each task's image path in its data."""

from efficientdet_keras.data.layouts.json_exports import find_exports, read_exports
from efficientdet_keras.data.layouts.row import Layout


LAYOUT = Layout(
    name="label_studio", data_format="label_studio", title="Label Studio JSON",
    writers="Label Studio JSON and JSON-MIN (what its Export button gives)",
    recognised="`.json` files in the folder holding a list of tasks with rectangle labels (in "
               "percent of the image; a turned one is the upright box around it); each task's "
               "image (`/data/upload/...`, `/data/local-files/?d=...`) is the dataset folder's "
               "image of that file name, an upload's prefix aside. A task's boxes are its first "
               "annotation that was not cancelled",
    splits="`train`, `val`, `test` in the file names (one file alone is train)",
    sign="Label Studio JSON",
    find=lambda path: find_exports(path, "label_studio"),
    read=lambda found, options: read_exports(found, "label_studio", LAYOUT.title))
