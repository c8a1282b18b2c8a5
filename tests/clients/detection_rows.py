"""What both client scripts print: one JSON list per image of the client's detections."""

import json


def detection_row(box, category) -> dict:
    """A client's detection as {"box": [ymin, xmin, ymax, xmax] pixels, "score", "index",
    "name"}; `box` has origin_x, origin_y, width and height, as both clients give it."""
    return {"box": [box.origin_y, box.origin_x, box.origin_y + box.height,
                    box.origin_x + box.width],
            "score": category.score, "index": category.index, "name": category.category_name}


def print_detections(detections_per_image) -> None:
    """Prints [[row, ...] per image], each detection's first (best) category."""
    print(json.dumps([[detection_row(d.bounding_box, d.categories[0]) for d in detections]
                      for detections in detections_per_image]))
