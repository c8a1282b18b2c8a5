"""Files a user gets from someone else, made to hurt: each is refused in one line naming the file,
without the work it tries to cause (entity expansion, a huge allocation, code run by a loader).
The archives a mirror serves are in test_hostile_mirror.py; bomb images inside datasets in
test_bad_data.py."""

import os
import time

import numpy as np
import pytest

from test_voc import make_voc_tree
from efficientdet_keras.config.overrides import read_yaml
from efficientdet_keras.data.formats.coco_json import read_coco_json
from efficientdet_keras.data.formats.voc import load_voc_records
from efficientdet_keras.inference.images import load_image

pytestmark = pytest.mark.quick

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE annotation [
 <!ENTITY a "aaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
 <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
 <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
 <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
 <!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;">
 <!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">
 <!ENTITY i "&h;&h;&h;&h;&h;&h;&h;&h;&h;&h;">
]>
<annotation><size><width>20</width><height>16</height></size>
<object><name>&i;</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax>
</bndbox></object></annotation>
"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE annotation [<!ENTITY secret SYSTEM "file://{path}">]>
<annotation><size><width>20</width><height>16</height></size>
<object><name>&secret;</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax>
</bndbox></object></annotation>
"""


@pytest.mark.parametrize("xml", ["billion laughs", "external entity"])
def test_voc_xml_with_entities_is_refused_in_one_line(xml, tmp_path):
    root = make_voc_tree(tmp_path / "VOC2012")
    secret = tmp_path / "secret.txt"
    secret.write_text("person")  # A class name: read through the entity, it would pass.
    annotation = os.path.join(root, "Annotations", "000001.xml")
    with open(annotation, "w") as f:
        f.write(BILLION_LAUGHS if xml == "billion laughs" else
                EXTERNAL_ENTITY.format(path=secret))
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        load_voc_records(root, "train")
    assert time.monotonic() - started < 10
    message = str(refused.value)
    assert message.startswith("%s is not a valid VOC annotation: " % annotation)
    assert "\n" not in message and "Entit" in message, message


def test_a_coco_json_too_large_for_memory_is_refused_before_it_is_read(tmp_path):
    annotation = tmp_path / "instances.json"
    with open(annotation, "wb") as f:
        f.truncate(1 << 40)  # A sparse terabyte: no disk used, nothing to read.
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^%s is 1099.5 GB; parsing a COCO JSON takes about 5 "
                                         r"times its size in memory, and this machine has "
                                         r"[\d.]+ GB available$" % annotation):
        read_coco_json(str(annotation))
    assert time.monotonic() - started < 5


def test_coco_json_is_read_as_utf8_whatever_the_locale(tmp_path):
    text = ('{"images": [{"id": 1, "file_name": "caf\u00e9.jpg", "height": 4, "width": 4}], '
            '"annotations": [], "categories": [{"id": 1, "name": "th\u00e9"}]}')
    with_bom = tmp_path / "bom.json"
    with_bom.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))  # As Windows tools write it.
    assert read_coco_json(str(with_bom))["categories"][0]["name"] == "th\u00e9"
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=r"^%s is not UTF-8 text, which JSON must be \(byte "
                                         r"\d+ is 0xe9\); save it as UTF-8$" % latin1):
        read_coco_json(str(latin1))


def test_an_image_file_claiming_100k_by_100k_pixels_is_refused_by_its_header(tmp_path):
    from test_bad_data import claiming
    for image_format in ("png", "jpeg", "gif", "bmp"):
        path = tmp_path / ("bomb." + image_format)
        width, height = (60000, 60000) if image_format == "jpeg" else (
            (65535, 65535) if image_format == "gif" else (100000, 100000))
        path.write_bytes(claiming(image_format, width, height))
        with pytest.raises(ValueError) as refused:
            load_image(str(path))
        message = str(refused.value)
        assert message.startswith("%s: " % path) and "\n" not in message, message
        assert "pixels" in message and ("%d x %d" % (width, height) in message
                                        or "%d pixels" % (width * height) in message), message
    path = tmp_path / "fine.png"
    from PIL import Image
    Image.fromarray(np.zeros([8, 12, 3], np.uint8)).save(path)
    assert load_image(str(path)).shape == (8, 12, 3)


def test_yaml_configs_are_loaded_safely(tmp_path):
    marker = tmp_path / "ran"
    hostile = tmp_path / "hparams.yaml"
    hostile.write_text("image_size: !!python/object/apply:os.system ['touch %s']\n" % marker)
    with pytest.raises(ValueError, match="^Cannot parse YAML file %s: " % hostile):
        read_yaml(str(hostile))
    assert not marker.exists()
