"""Declarative sheet templates: load, validate (every problem at once), look up, export a schema.

A template describes one printed sheet in millimetres on the page (origin at the top-left corner
of the page, x to the right, y down). See ``docs/TEMPLATES.md`` for the format and
``calibration/templates/DESIGN.md`` for the house editions.

Coordinate convention (the whole project): points are ``(N, 2)`` float arrays of ``(x, y)``;
images are indexed ``[row, col]``; template geometry is in millimetres on the printed page.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from sheetcheck.errors import TemplateError, UnknownTemplateError

FORMAT_VERSION = 1

#: The five pencils of Pick a Pen, in the order the rulebooks list them.
PENCIL_COLOURS: tuple[str, ...] = ("orange", "red", "blue", "green", "purple")

#: Marks a pencil sheet region can carry. ``written`` is for number fields (something was
#: written by hand); ``crossed`` is a region crossed out rather than coloured.
PENCIL_MARKS: tuple[str, ...] = ("empty",) + PENCIL_COLOURS + ("crossed",)
DEFAULT_MARK_VOCABULARY: tuple[str, ...] = PENCIL_MARKS + ("written",)

#: Region kinds. New games add kinds here (and document them in docs/TEMPLATES.md).
REGION_KINDS: tuple[str, ...] = (
    # Pick a Pen
    "symbol", "box", "star", "number_field", "swatch",
    "space", "entry_point", "treasure", "coin", "connection", "whirlpool", "propeller",
    # Pencil Pirates (planned) and Reef (planned)
    "island", "island_corner", "sea_symbol", "stack",
)

SHAPE_TYPES = ("rect", "circle", "polygon", "segment")
PAGE_SIZES_MM = {"A4": (210.0, 297.0), "Letter": (215.9, 279.4)}
ARUCO_DICTIONARIES = ("DICT_4X4_50", "DICT_4X4_100", "DICT_5X5_100")
MARKER_CORNERS = ("top_left", "top_right", "bottom_right", "bottom_left")

TEMPLATE_DIR = Path(__file__).with_name("templates")


# --------------------------------------------------------------------------------------------
# value types
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """Geometry of a region in mm. ``type`` is one of rect, circle, polygon, segment.

    rect: ``x, y, w, h`` (top-left corner and size); circle: ``cx, cy, r``;
    polygon: ``points`` ((N, 2) x, y); segment: ``p1, p2, width`` (a stroke between two
    points, for line-like regions such as connections).
    """

    type: str
    params: Mapping[str, Any]

    def polygon(self, *, segments: int = 32) -> np.ndarray:
        """Outline as an ``(N, 2)`` array of (x, y) mm (circles approximated by ``segments``)."""
        p = self.params
        if self.type == "rect":
            x, y, w, h = p["x"], p["y"], p["w"], p["h"]
            return np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], float)
        if self.type == "circle":
            t = np.linspace(0, 2 * math.pi, segments, endpoint=False)
            return np.stack([p["cx"] + p["r"] * np.cos(t), p["cy"] + p["r"] * np.sin(t)], 1)
        if self.type == "polygon":
            return np.asarray(p["points"], float)
        if self.type == "segment":
            a, b = np.asarray(p["p1"], float), np.asarray(p["p2"], float)
            d = b - a
            n = np.array([-d[1], d[0]]) / max(np.hypot(*d), 1e-9) * (p["width"] / 2)
            return np.array([a + n, b + n, b - n, a - n])
        raise ValueError(f"unknown shape type {self.type!r}")

    def bbox(self) -> tuple[float, float, float, float]:
        """``(xmin, ymin, xmax, ymax)`` in mm."""
        poly = self.polygon()
        return (float(poly[:, 0].min()), float(poly[:, 1].min()),
                float(poly[:, 0].max()), float(poly[:, 1].max()))

    def centre(self) -> tuple[float, float]:
        p = self.params
        if self.type == "circle":
            return (float(p["cx"]), float(p["cy"]))
        if self.type == "segment":
            return ((p["p1"][0] + p["p2"][0]) / 2, (p["p1"][1] + p["p2"][1]) / 2)
        poly = self.polygon()
        return (float(poly[:, 0].mean()), float(poly[:, 1].mean()))

    def to_json(self) -> dict:
        return {"type": self.type, **{k: v for k, v in self.params.items()}}


@dataclass(frozen=True)
class Region:
    """One readable (or structural) place on the sheet.

    ``readable`` is False for regions that only give structure (for example the plain spaces
    of a Reefs map, which connections join but which carry no mark of their own).
    ``print`` tells the renderer how to draw the region (glyph, outline colour, label, fill).
    ``meaning`` is the region's game meaning; its keys depend on the game and kind.
    """

    id: str
    kind: str
    shape: Shape
    marks: tuple[str, ...]
    meaning: Mapping[str, Any]
    readable: bool = True
    print: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Marker:
    id: int
    corner: str
    x: float  # top-left corner of the marker, mm
    y: float
    size: float  # side, mm (the black square including its border)

    def corners_mm(self) -> np.ndarray:
        """The marker's four corners in ArUco order (top-left, top-right, bottom-right,
        bottom-left of the marker as printed upright), ``(4, 2)`` mm."""
        x, y, s = self.x, self.y, self.size
        return np.array([[x, y], [x + s, y], [x + s, y + s], [x, y + s]], float)


@dataclass(frozen=True)
class Template:
    id: str
    version: str
    game: str
    level: int | None
    title: str
    page_size: str
    width_mm: float
    height_mm: float
    aruco_dictionary: str
    markers: tuple[Marker, ...]
    regions: tuple[Region, ...]
    artwork: tuple[Mapping[str, Any], ...]
    mark_vocabulary: tuple[str, ...]
    meta: Mapping[str, Any]
    source: str | None = None

    def region(self, region_id: str) -> Region:
        try:
            return self._index[region_id]
        except KeyError:
            raise KeyError(f"template {self.id!r} has no region {region_id!r}") from None

    @property
    def _index(self) -> dict[str, Region]:
        idx = self.__dict__.get("_idx")
        if idx is None:
            idx = {r.id: r for r in self.regions}
            object.__setattr__(self, "_idx", idx)
        return idx

    def readable_regions(self) -> tuple[Region, ...]:
        return tuple(r for r in self.regions if r.readable)

    def regions_of_kind(self, kind: str) -> tuple[Region, ...]:
        return tuple(r for r in self.regions if r.kind == kind)

    @property
    def marker_ids(self) -> tuple[int, ...]:
        return tuple(m.id for m in self.markers)


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------

def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _point(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 2 and all(_num(c) for c in v)


def _check_shape(where: str, s: Any, problems: list[str]) -> Shape | None:
    if not isinstance(s, dict):
        problems.append(f"{where}: 'shape' must be an object, got {s!r}")
        return None
    t = s.get("type")
    need = {"rect": ("x", "y", "w", "h"), "circle": ("cx", "cy", "r"),
            "polygon": ("points",), "segment": ("p1", "p2", "width")}
    if t not in need:
        problems.append(f"{where}: shape type {t!r} is not one of {', '.join(SHAPE_TYPES)}")
        return None
    ok = True
    for k in need[t]:
        if k not in s:
            problems.append(f"{where}: {t} shape is missing {k!r}")
            ok = False
    if not ok:
        return None
    if t == "rect" and not all(_num(s[k]) for k in need[t]):
        problems.append(f"{where}: rect values must be numbers"); return None
    if t == "rect" and (s["w"] <= 0 or s["h"] <= 0):
        problems.append(f"{where}: rect has non-positive size w={s['w']} h={s['h']}"); return None
    if t == "circle" and (not all(_num(s[k]) for k in need[t]) or s["r"] <= 0):
        problems.append(f"{where}: circle needs numeric cx, cy and r > 0"); return None
    if t == "polygon" and (not isinstance(s["points"], list) or len(s["points"]) < 3
                           or not all(_point(p) for p in s["points"])):
        problems.append(f"{where}: polygon needs at least 3 [x, y] points"); return None
    if t == "segment" and (not _point(s["p1"]) or not _point(s["p2"]) or not _num(s["width"])
                           or s["width"] <= 0):
        problems.append(f"{where}: segment needs [x, y] p1 and p2 and a width > 0"); return None
    return Shape(t, {k: v for k, v in s.items() if k != "type"})


def validate_template_dict(doc: Any, *, source: str = "<template>") -> Template:
    """Validate a parsed template document and build a :class:`Template`.

    Raises
    ------
    TemplateError
        naming every problem found (not just the first).
    """
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise TemplateError(f"template {source}: the top level must be a JSON object",
                            hint="Check the file is a sheetcheck template.")

    def req(key, typ, where="template"):
        if key not in doc:
            problems.append(f"{where}: missing required field {key!r}")
            return None
        v = doc[key]
        if not isinstance(v, typ) or isinstance(v, bool) and typ is not bool:
            problems.append(f"{where}: field {key!r} must be {getattr(typ, '__name__', typ)}, got {v!r}")
            return None
        return v

    fmt = doc.get("format_version")
    if fmt != FORMAT_VERSION:
        problems.append(f"template: format_version must be {FORMAT_VERSION}, got {fmt!r}")
    tid = req("id", str)
    version = req("version", str)
    game = req("game", str)
    title = req("title", str)
    level = doc.get("level")
    if level is not None and (not isinstance(level, int) or isinstance(level, bool)):
        problems.append(f"template: 'level' must be an integer or null, got {level!r}")
    page = req("page", dict)
    width = height = None
    size_name = None
    if page is not None:
        size_name = page.get("size")
        if size_name not in PAGE_SIZES_MM:
            problems.append(f"page: size {size_name!r} is not one of {', '.join(PAGE_SIZES_MM)}")
        orient = page.get("orientation", "portrait")
        if orient not in ("portrait", "landscape"):
            problems.append(f"page: orientation {orient!r} must be portrait or landscape")
        if size_name in PAGE_SIZES_MM:
            w, h = PAGE_SIZES_MM[size_name]
            width, height = (h, w) if orient == "landscape" else (w, h)

    vocab = doc.get("mark_vocabulary", list(DEFAULT_MARK_VOCABULARY))
    if not isinstance(vocab, list) or not all(isinstance(m, str) for m in vocab) or "empty" not in vocab:
        problems.append("template: mark_vocabulary must be a list of strings including 'empty'")
        vocab = list(DEFAULT_MARK_VOCABULARY)

    markers: list[Marker] = []
    mk = req("markers", dict)
    dictionary = None
    if mk is not None:
        dictionary = mk.get("dictionary")
        if dictionary not in ARUCO_DICTIONARIES:
            problems.append(f"markers: dictionary {dictionary!r} is not one of {', '.join(ARUCO_DICTIONARIES)}")
        items = mk.get("items")
        if not isinstance(items, list) or len(items) != 4:
            problems.append("markers: 'items' must list exactly 4 corner markers")
        else:
            seen_ids, seen_corners = set(), set()
            for i, m in enumerate(items):
                w = f"markers.items[{i}]"
                if not isinstance(m, dict):
                    problems.append(f"{w}: must be an object"); continue
                if not (isinstance(m.get("id"), int) and 0 <= m["id"] < 50):
                    problems.append(f"{w}: id must be an integer 0..49, got {m.get('id')!r}"); continue
                if m.get("corner") not in MARKER_CORNERS:
                    problems.append(f"{w}: corner must be one of {', '.join(MARKER_CORNERS)}"); continue
                if not all(_num(m.get(k)) for k in ("x", "y", "size")) or m["size"] <= 0:
                    problems.append(f"{w}: needs numeric x, y and size > 0"); continue
                if m["id"] in seen_ids:
                    problems.append(f"{w}: marker id {m['id']} is used twice")
                if m["corner"] in seen_corners:
                    problems.append(f"{w}: corner {m['corner']} is used twice")
                seen_ids.add(m["id"]); seen_corners.add(m["corner"])
                markers.append(Marker(m["id"], m["corner"], float(m["x"]), float(m["y"]), float(m["size"])))

    regions: list[Region] = []
    raw_regions = req("regions", list)
    ids_seen: dict[str, int] = {}
    for i, r in enumerate(raw_regions or []):
        where = f"regions[{i}]"
        if not isinstance(r, dict):
            problems.append(f"{where}: must be an object"); continue
        rid = r.get("id")
        if not isinstance(rid, str) or not rid:
            problems.append(f"{where}: missing 'id'")
            rid = None
        else:
            where = f"region {rid!r}"
            if rid in ids_seen:
                problems.append(f"{where}: duplicate id (also regions[{ids_seen[rid]}])")
            ids_seen.setdefault(rid, i)
        kind = r.get("kind")
        if kind not in REGION_KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {', '.join(REGION_KINDS)}")
        shape = _check_shape(where, r.get("shape"), problems)
        marks = r.get("marks")
        if not isinstance(marks, list) or not marks or "empty" not in marks:
            problems.append(f"{where}: 'marks' must be a non-empty list including 'empty'")
            marks = ["empty"]
        else:
            bad = [m for m in marks if m not in vocab]
            if bad:
                problems.append(f"{where}: marks {bad} are not in the mark vocabulary")
        meaning = r.get("meaning", {})
        if not isinstance(meaning, dict):
            problems.append(f"{where}: 'meaning' must be an object"); meaning = {}
        readable = r.get("readable", True)
        if not isinstance(readable, bool):
            problems.append(f"{where}: 'readable' must be true or false"); readable = True
        pr = r.get("print", {})
        if not isinstance(pr, dict):
            problems.append(f"{where}: 'print' must be an object"); pr = {}
        if shape is not None and width is not None:
            x0, y0, x1, y1 = shape.bbox()
            if x0 < 0 or y0 < 0 or x1 > width or y1 > height:
                problems.append(f"{where}: lies off the {width:g} x {height:g} mm page "
                                f"(bbox {x0:.1f},{y0:.1f} to {x1:.1f},{y1:.1f})")
        if rid and kind in REGION_KINDS and shape is not None:
            regions.append(Region(rid, kind, shape, tuple(marks), meaning, readable, pr))

    # references between regions (meaning keys that name other regions)
    for reg in regions:
        for key in ("a", "b", "space"):
            ref = reg.meaning.get(key)
            if isinstance(ref, str) and ref not in ids_seen:
                problems.append(f"region {reg.id!r}: meaning.{key} names unknown region {ref!r}")

    if width is not None:
        for m in markers:
            if m.x < 0 or m.y < 0 or m.x + m.size > width or m.y + m.size > height:
                problems.append(f"marker {m.id}: lies off the page")

    artwork = doc.get("artwork", [])
    if not isinstance(artwork, list) or not all(isinstance(a, dict) and "type" in a for a in artwork):
        problems.append("template: 'artwork' must be a list of objects with a 'type'")
        artwork = []
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        problems.append("template: 'meta' must be an object"); meta = {}

    if problems:
        raise TemplateError(f"template {source} is invalid ({len(problems)} problem"
                            f"{'s' if len(problems) != 1 else ''}):", problems,
                            hint="Fix the template file (see docs/TEMPLATES.md) and try again.")
    return Template(tid, version, game, level, title, size_name, float(width), float(height),
                    dictionary, tuple(markers), tuple(regions), tuple(artwork), tuple(vocab),
                    meta, source)


def load_template_file(path: str | Path) -> Template:
    """Load and validate one template JSON file."""
    from sheetcheck.files import read_json_file

    doc = read_json_file(path, what="template file", error=TemplateError, hint="Check the path.")
    return validate_template_dict(doc, source=str(path))


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _registry() -> dict[str, Path]:
    reg = {}
    for p in sorted(TEMPLATE_DIR.glob("*.json")):
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
            tid = doc["id"]
        except Exception:  # a damaged file is reported when it is loaded by name
            tid = p.stem
        reg[tid] = p
    return reg


def template_ids() -> list[str]:
    """Ids of the bundled templates, sorted."""
    return sorted(_registry())


@lru_cache(maxsize=None)
def get_template(template_id: str) -> Template:
    """Load a bundled template by id (cached).

    Raises
    ------
    UnknownTemplateError
        listing the valid ids.
    """
    reg = _registry()
    if template_id not in reg:
        raise UnknownTemplateError(
            f"unknown template {template_id!r}.",
            hint=f"Known templates: {', '.join(sorted(reg)) or '(none)'}; "
                 "`sheetcheck templates` lists them.")
    return load_template_file(reg[template_id])


def all_templates() -> list[Template]:
    return [get_template(t) for t in template_ids()]


def template_for_marker_id(marker_id: int) -> Template | None:
    """The bundled template that uses ArUco marker ``marker_id``, or None."""
    for t in all_templates():
        if marker_id in t.marker_ids:
            return t
    return None


# --------------------------------------------------------------------------------------------
# JSON Schema (for editors; validation above is the authority and reports every problem)
# --------------------------------------------------------------------------------------------

def json_schema() -> dict:
    num = {"type": "number"}
    pt = {"type": "array", "items": num, "minItems": 2, "maxItems": 2}
    shape = {"oneOf": [
        {"type": "object", "required": ["type", "x", "y", "w", "h"],
         "properties": {"type": {"const": "rect"}, "x": num, "y": num, "w": num, "h": num}},
        {"type": "object", "required": ["type", "cx", "cy", "r"],
         "properties": {"type": {"const": "circle"}, "cx": num, "cy": num, "r": num}},
        {"type": "object", "required": ["type", "points"],
         "properties": {"type": {"const": "polygon"}, "points": {"type": "array", "items": pt, "minItems": 3}}},
        {"type": "object", "required": ["type", "p1", "p2", "width"],
         "properties": {"type": {"const": "segment"}, "p1": pt, "p2": pt, "width": num}},
    ]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://sheetcheck.example/schema/template-v1.json",
        "title": "sheetcheck sheet template",
        "type": "object",
        "required": ["format_version", "id", "version", "game", "title", "page", "markers", "regions"],
        "properties": {
            "format_version": {"const": FORMAT_VERSION},
            "id": {"type": "string"}, "version": {"type": "string"},
            "game": {"type": "string"}, "level": {"type": ["integer", "null"]},
            "title": {"type": "string"},
            "page": {"type": "object", "required": ["size"], "properties": {
                "size": {"enum": list(PAGE_SIZES_MM)},
                "orientation": {"enum": ["portrait", "landscape"]}}},
            "mark_vocabulary": {"type": "array", "items": {"type": "string"}},
            "markers": {"type": "object", "required": ["dictionary", "items"], "properties": {
                "dictionary": {"enum": list(ARUCO_DICTIONARIES)},
                "items": {"type": "array", "minItems": 4, "maxItems": 4, "items": {
                    "type": "object", "required": ["id", "corner", "x", "y", "size"],
                    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 49},
                                   "corner": {"enum": list(MARKER_CORNERS)},
                                   "x": num, "y": num, "size": num}}}}},
            "regions": {"type": "array", "items": {
                "type": "object", "required": ["id", "kind", "shape", "marks"],
                "properties": {
                    "id": {"type": "string", "minLength": 1},
                    "kind": {"enum": list(REGION_KINDS)},
                    "shape": shape,
                    "marks": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "meaning": {"type": "object"},
                    "readable": {"type": "boolean"},
                    "print": {"type": "object"}}}},
            "artwork": {"type": "array", "items": {"type": "object", "required": ["type"]}},
            "meta": {"type": "object"},
        },
    }


def write_json_schema(path: str | Path) -> None:
    Path(path).write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")


def template_summary(t: Template) -> dict:
    return {"id": t.id, "game": t.game, "level": t.level, "version": t.version, "title": t.title}


def iter_region_ids(t: Template, kinds: Iterable[str] | None = None) -> list[str]:
    ks = set(kinds) if kinds is not None else None
    return [r.id for r in t.regions if ks is None or r.kind in ks]
