import copy
import json

import pytest

from calibration.template import validate_template_dict, json_schema
from sheetcheck.errors import TemplateError

MINIMAL = {
    "format_version": 1, "id": "t", "version": "1.0.0", "game": "g", "level": 1, "title": "T",
    "page": {"size": "A4"},
    "markers": {"dictionary": "DICT_4X4_50", "items": [
        {"id": 0, "corner": "top_left", "x": 5, "y": 5, "size": 12},
        {"id": 1, "corner": "top_right", "x": 193, "y": 5, "size": 12},
        {"id": 2, "corner": "bottom_right", "x": 193, "y": 280, "size": 12},
        {"id": 3, "corner": "bottom_left", "x": 5, "y": 280, "size": 12}]},
    "regions": [
        {"id": "a", "kind": "box", "shape": {"type": "rect", "x": 20, "y": 20, "w": 8, "h": 8},
         "marks": ["empty", "red"]},
        {"id": "b", "kind": "connection",
         "shape": {"type": "segment", "p1": [30, 30], "p2": [40, 30], "width": 2},
         "marks": ["empty", "red"], "meaning": {"a": "a", "b": "a"}},
    ],
}


def test_minimal_template_loads():
    t = validate_template_dict(copy.deepcopy(MINIMAL))
    assert t.width_mm == 210 and t.height_mm == 297
    assert t.region("b").shape.polygon().shape == (4, 2)
    assert t.marker_ids == (0, 1, 2, 3)


def test_damaged_template_names_every_problem():
    doc = copy.deepcopy(MINIMAL)
    del doc["title"]                                   # missing field
    doc["regions"].append(copy.deepcopy(doc["regions"][0]))  # duplicate id
    doc["regions"].append({"id": "off", "kind": "box", "marks": ["empty"],
                           "shape": {"type": "rect", "x": 205, "y": 10, "w": 10, "h": 10}})
    doc["regions"][1]["meaning"]["b"] = "nowhere"       # dangling reference
    with pytest.raises(TemplateError) as ei:
        validate_template_dict(doc, source="damaged.json")
    msg = str(ei.value)
    assert "missing required field 'title'" in msg
    assert "duplicate id" in msg
    assert "'off'" in msg and "off the" in msg
    assert "unknown region 'nowhere'" in msg
    assert len(ei.value.problems) == 4


def test_schema_accepts_minimal():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(MINIMAL, json_schema())
    bad = copy.deepcopy(MINIMAL)
    bad["regions"][0]["kind"] = "nonsense"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json_schema())
