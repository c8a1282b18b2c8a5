"""drawing: boxes land where they were asked, coloured by class, with labels; side by side."""

import numpy as np
import pytest

from efficientdet_keras.utils.drawing import class_colour, draw_boxes, encode_png, side_by_side


def test_box_outline_is_drawn_in_its_class_colour_at_its_pixels():
    image = np.zeros((64, 80, 3), np.uint8)
    drawn = draw_boxes(image, [[30, 10, 60, 50]], [2], line_width=1)
    colour = np.array(class_colour(2))
    # Left and right edges (x = 10 and 50) in the box's rows below the label.
    assert (drawn[40:60, 10] == colour).all() and (drawn[40:60, 50] == colour).all()
    assert (drawn[59:61, 20:40] == colour).all(axis=-1).any()  # Bottom edge.
    assert (drawn[45, 20:40] == 0).all()  # Inside stays untouched.
    assert image.sum() == 0  # The input is not modified.


def test_scores_below_threshold_and_padding_classes_are_not_drawn():
    image = np.zeros((32, 32, 3), np.uint8)
    drawn = draw_boxes(image, [[5, 5, 20, 20], [8, 8, 25, 25]], [1, 0], scores=[0.2, 0.9],
                       score_threshold=0.5)
    assert drawn.sum() == 0


def test_label_text_is_drawn_above_the_box_when_there_is_room():
    image = np.zeros((80, 80, 3), np.uint8)
    with_label = draw_boxes(image, [[40, 10, 70, 70]], [1], label_map={1: "circle"})
    # The label's filled background is above the box top (y < 40).
    assert (with_label[25:39, 12:30] == np.array(class_colour(1))).all(axis=-1).any()


def test_side_by_side_places_both_images_with_titles():
    left = np.full((20, 30, 3), 10, np.uint8)
    right = np.full((24, 16, 3), 200, np.uint8)
    both = side_by_side(left, right, titles=("ground truth", "predictions"), gap=4)
    assert both.shape == (24 + 14, 30 + 4 + 16, 3)
    assert (both[14:34, :30] == 10).all() and (both[14:38, 34:] == 200).all()
    assert (both[14:, 30:34] == 255).all()


def test_png_round_trip_and_bad_shape_error():
    import io

    from PIL import Image
    image = np.random.RandomState(0).randint(0, 255, (9, 7, 3)).astype(np.uint8)
    assert (np.asarray(Image.open(io.BytesIO(encode_png(image)))) == image).all()
    with pytest.raises(ValueError, match=r"\[H, W, 3\]"):
        draw_boxes(np.zeros((4, 4, 5)), [], [])
