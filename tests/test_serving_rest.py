"""The detection SavedModel answers the request bodies of TF Serving's REST predict API.

The model server has no Debian or PyPI package, so it cannot run here. Instead, each body is
decoded into tensors by the rules of the REST API's documentation (tensorflow.org/tfx/serving/
api_rest), the signature named by "signature_name" runs on them, and its outputs are encoded
back as the server answers: the checks are that every body a client would send finds its
signature's input names and types, and that every output has one row per instance.
"""

import base64
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from helpers import tiny_config
from efficientdet_keras import EfficientDetNet
from efficientdet_keras.exporters.saved_model import export_detector

SMALL = dict(image_size=64, num_classes=4, fpn_num_filters=16, fpn_cell_repeats=1,
             box_class_repeats=1)
OUTPUTS = ("detection_boxes", "detection_classes", "detection_scores", "num_detections")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The loaded SavedModel, exported into a version folder as TF Serving reads it."""
    base = tmp_path_factory.mktemp("serving") / "detector"
    model = EfficientDetNet(config=tiny_config(**SMALL))
    export_detector(model, str(base / "1"))
    return tf.saved_model.load(str(base / "1"))


def json_value(value):
    """A JSON value as the REST API reads it: {"b64": ...} is bytes, lists nest."""
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise ValueError("an object value must hold only the key b64, got %s" % sorted(value))
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [json_value(v) for v in value]
    return value


def decode_request(body: str, loaded):
    """(signature, {input name: tensor}) of a predict request body, by the API's rules.

    Row format ("instances"): a list with one entry per instance; with one named input an
    entry is that input's value, else an object of {input name: value}. Columnar format
    ("inputs"): a value for the one input, or an object of {input name: batched value}.
    """
    request = json.loads(body)
    signature = loaded.signatures[request.get("signature_name", "serving_default")]
    _, specs = signature.structured_input_signature
    names = sorted(specs)
    if "instances" in request:
        rows = request["instances"]
        if len(names) == 1 and not (rows and isinstance(rows[0], dict) and names[0] in rows[0]):
            columns = {names[0]: [json_value(row) for row in rows]}
        else:
            columns = {name: [json_value(row[name]) for row in rows] for name in names}
    else:
        inputs = request["inputs"]
        if len(names) == 1 and not (isinstance(inputs, dict) and names[0] in inputs):
            inputs = {names[0]: inputs}
        columns = {name: json_value(inputs[name]) for name in names}
    return signature, {name: tf.constant(columns[name], dtype=specs[name].dtype)
                       for name in names}


def predict(body: str, loaded) -> dict:
    """The response body TF Serving would send for `body` (row format in, row format out)."""
    signature, inputs = decode_request(body, loaded)
    outputs = {name: value.numpy().tolist() for name, value in signature(**inputs).items()}
    if "instances" in json.loads(body):
        count = len(next(iter(outputs.values())))
        return {"predictions": [{name: outputs[name][i] for name in outputs}
                                for i in range(count)]}
    return {"outputs": outputs}


def b64(data: bytes) -> dict:
    return {"b64": base64.b64encode(data).decode("ascii")}


def images_and_bodies():
    """Two images of different sizes, as PNG files, tf.Examples and pixel lists."""
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in ((48, 80, 3),
                                                                        (70, 50, 3))]
    png = [tf.io.encode_png(image).numpy() for image in images]
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[p]))}))
        .SerializeToString() for p in png]
    return images, png, examples


@pytest.mark.quick
def test_the_signatures_take_the_inputs_the_rest_bodies_name(served):
    """What `GET /v1/models/<name>/metadata` lists: the names and types clients must send."""
    expected = {"serving_default": ("images", tf.uint8, [None, None, None, 3]),
                "image_bytes": ("images", tf.string, [None]),
                "tf_example": ("examples", tf.string, [None])}
    for name, (input_name, dtype, shape) in expected.items():
        _, specs = served.signatures[name].structured_input_signature
        assert list(specs) == [input_name]
        assert specs[input_name].dtype == dtype
        assert specs[input_name].shape.as_list() == shape
        assert sorted(served.signatures[name].structured_outputs) == sorted(OUTPUTS)


def test_row_and_columnar_bodies_give_one_row_per_instance(served):
    images, png, examples = images_and_bodies()
    bodies = [
        {"signature_name": "image_bytes", "instances": [b64(p) for p in png]},
        {"signature_name": "image_bytes", "instances": [{"images": b64(p)} for p in png]},
        {"signature_name": "image_bytes", "inputs": {"images": [b64(p) for p in png]}},
        {"signature_name": "image_bytes", "inputs": [b64(p) for p in png]},
        {"signature_name": "tf_example", "instances": [b64(e) for e in examples]},
        {"signature_name": "tf_example", "inputs": {"examples": [b64(e) for e in examples]}},
    ]
    answers = []
    for body in bodies:
        response = predict(json.dumps(body), served)
        if "predictions" in response:
            rows = response["predictions"]
        else:
            rows = [{name: response["outputs"][name][i] for name in OUTPUTS}
                    for i in range(len(png))]
        assert len(rows) == len(png), body
        for row in rows:
            assert sorted(row) == sorted(OUTPUTS)
            count = len(row["detection_scores"])
            assert np.shape(row["detection_boxes"]) == (count, 4)
            assert len(row["detection_classes"]) == count
        json.dumps(response)  # The server's answer is plain JSON.
        answers.append(rows)
    # Every body gives the detections of the same two images.
    for rows in answers[1:]:
        for row, first in zip(rows, answers[0]):
            np.testing.assert_allclose(row["detection_scores"], first["detection_scores"],
                                       atol=1e-6)
            np.testing.assert_allclose(row["detection_boxes"], first["detection_boxes"],
                                       atol=1e-6)
    # Pixels as nested lists (serving_default) take one image size per request; each image
    # alone gives what its PNG gave.
    for image, first in zip(images, answers[0]):
        body = {"instances": [image.tolist()]}
        row, = predict(json.dumps(body), served)["predictions"]
        np.testing.assert_allclose(row["detection_scores"], first["detection_scores"],
                                   atol=1e-6)
        np.testing.assert_allclose(row["detection_boxes"], first["detection_boxes"], atol=1e-6)


def test_a_body_without_b64_for_bytes_is_refused_by_the_rules(served):
    """Bytes sent as a plain string are not base64-decoded, so the image is not one."""
    _, png, _ = images_and_bodies()
    body = {"signature_name": "image_bytes",
            "instances": [base64.b64encode(png[0]).decode("ascii")]}
    with pytest.raises(tf.errors.InvalidArgumentError):
        predict(json.dumps(body), served)


def test_the_export_guides_request_is_answered_by_its_signature(served, tmp_path, monkeypatch):
    """The Python snippet of the guide's TF Serving section, run as written on a photo, writes
    a body that the signature it names answers."""
    from doc_blocks import DOCS_DIR, page_blocks
    snippet, = [block for block in page_blocks(os.path.join(DOCS_DIR, "guides", "export.md"))
                if block.section == "Serving with TF Serving" and block.language == "python"]
    (tmp_path / "photos").mkdir()
    image, _, _ = images_and_bodies()
    (tmp_path / "photos" / "street.jpg").write_bytes(tf.io.encode_jpeg(image[0]).numpy())
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet.code, snippet.id, "exec"), {})
    body = (tmp_path / "request.json").read_text()
    assert json.loads(body)["signature_name"] == "image_bytes"
    row, = predict(body, served)["predictions"]
    assert sorted(row) == sorted(OUTPUTS)
    count = int(row["num_detections"])
    assert 0 < count <= len(row["detection_scores"])
    height, width = image[0].shape[:2]
    pixels = np.array(row["detection_boxes"][:count]) * [height, width, height, width]
    # In original pixels, within the letterboxed square (boxes may reach into the padding).
    assert pixels.min() >= 0.0 and pixels.max() <= max(height, width) * 1.02
    assert pixels[:, 3].max() > 0.9 * width  # Scaled by the width, not normalised twice.
