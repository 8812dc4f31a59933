"""Small synthetic sheets and photos for the geometry tests (independent of the simulator).

``synthetic_template(variant)`` builds a valid template (A4 landscape, four DICT_4X4_50 markers, a
grid of boxes and some artwork) whose layout differs per variant, so that identification without
markers has several similar candidates. ``synth_photo`` paints it, bends it (curl), puts it in a
photo with a known homography and returns the truth. Nothing here is used by the reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from calibration.template import Template, validate_template_dict
from vision._geom_render import MM_PER_INCH, project, reference_render

PENCILS = {"orange": (236, 120, 40), "red": (200, 40, 50), "blue": (40, 80, 190),
           "green": (50, 150, 70), "purple": (120, 60, 150)}


def synthetic_template(variant: int = 0, *, portrait: bool = False) -> Template:
    """A valid test template; ``variant`` k uses marker ids 4k..4k+3 and its own layout."""
    W, H = (210.0, 297.0) if portrait else (297.0, 210.0)
    s = 14.0
    m = 8.0
    markers = [
        {"id": 4 * variant + 0, "corner": "top_left", "x": m, "y": m, "size": s},
        {"id": 4 * variant + 1, "corner": "top_right", "x": W - m - s, "y": m, "size": s},
        {"id": 4 * variant + 2, "corner": "bottom_right", "x": W - m - s, "y": H - m - s, "size": s},
        {"id": 4 * variant + 3, "corner": "bottom_left", "x": m, "y": H - m - s, "size": s},
    ]
    rows, cols = 5 + variant % 3, 8 + (variant * 2) % 5
    box, gap = 12.0 + variant % 2 * 2, 4.0
    x0, y0 = 36.0 + 3 * (variant % 4), 40.0 + 2 * (variant % 3)
    regions = []
    for r in range(rows):
        for c in range(cols):
            x, y = x0 + c * (box + gap), y0 + r * (box + gap)
            if x + box > W - 30 or y + box > H - 30:
                continue
            shape = ({"type": "circle", "cx": x + box / 2, "cy": y + box / 2, "r": box / 2}
                     if (r + c + variant) % 4 == 0 else {"type": "rect", "x": x, "y": y, "w": box, "h": box})
            regions.append({"id": f"cell.r{r + 1}.c{c + 1}", "kind": "symbol", "shape": shape,
                            "marks": ["empty", "orange", "red", "blue", "green", "purple", "crossed"],
                            "meaning": {"row": r + 1, "col": c + 1}})
    artwork = [
        {"type": "rect", "x": 28, "y": 30, "w": W - 56, "h": H - 60, "width": 0.8},
        {"type": "line", "p1": [28, 36 + variant * 3], "p2": [W - 28, 36 + variant * 3], "width": 0.5},
        {"type": "line", "p1": [W / 2 + 10 * variant, 30], "p2": [W / 2 + 10 * variant, 36], "width": 0.5},
        {"type": "circle", "cx": 45 + 6 * variant, "cy": H - 18, "r": 2 + variant, "width": 0.5},
    ]
    for i in range(variant + 1):
        artwork.append({"type": "rect", "x": W - 60 + 6 * i, "y": H - 27, "w": 4, "h": 4, "width": 0.4,
                        "fill": "#000000"})
    doc = {"format_version": 1, "id": f"test-{variant}", "version": "1.0.0", "game": "test",
           "level": variant, "title": f"test sheet {variant}",
           "page": {"size": "A4", "orientation": "portrait" if portrait else "landscape"},
           "markers": {"dictionary": "DICT_4X4_50", "items": markers},
           "regions": regions, "artwork": artwork}
    return validate_template_dict(doc, source=f"<test-{variant}>")


@dataclass(frozen=True)
class SynthPhoto:
    image: np.ndarray          # (h, w, 3) uint8 RGB
    homography: np.ndarray     # template mm -> photo px (the page's plane, before curl)
    curl_mm: float

    def true_px(self, pts_mm: np.ndarray) -> np.ndarray:
        """Where points of the sheet (mm) really are in the photo, curl included."""
        pts = np.asarray(pts_mm, float).reshape(-1, 2)
        return project(self.homography, pts + _curl(pts, self.curl_mm, self._wh))

    @property
    def _wh(self):
        return self.__dict__["_page_wh"]


def _curl(pts: np.ndarray, amp: float, wh) -> np.ndarray:
    """Displacement (mm) of a curled page: a smooth bend, largest mid-page, plus a twist."""
    W, H = wh
    x, y = pts[:, 0] / W, pts[:, 1] / H
    dx = amp * 0.5 * np.sin(np.pi * y) * (x - 0.5)
    dy = amp * (np.sin(np.pi * x) * (0.3 + 0.7 * y) - 0.5)
    return np.stack([dx, dy], 1)


def synth_photo(template: Template, *, seed: int = 0, size: tuple[int, int] = (960, 720),
                rotation_deg: float = 0.0, fill: float = 0.75, tilt: float = 0.12,
                curl_mm: float = 0.0, markers: bool = True, marks: int = 12,
                cover_marker: int | None = None, blur_px: float = 0.0, noise: float = 3.0,
                shade: float = 0.25, offset: tuple[float, float] = (0.0, 0.0),
                dpi: float = 80.0, jpeg_quality: int | None = 85) -> SynthPhoto:
    """Photograph ``template`` with a random perspective, light, pencil marks and a curl."""
    rng = np.random.default_rng(seed)
    sheet = np.array(reference_render(template, dpi=dpi, markers=markers))
    k = dpi / MM_PER_INCH
    readable = [r for r in template.regions if r.readable]
    for reg in rng.choice(readable, size=min(marks, len(readable)), replace=False):
        col = list(PENCILS.values())[rng.integers(5)]
        poly = (reg.shape.polygon() * k).astype(np.float32)
        layer = sheet.copy()
        cv2.fillPoly(layer, [np.round(poly).astype(np.int32)], col)
        sheet = cv2.addWeighted(sheet, 0.35, layer, 0.65, 0)
    if cover_marker is not None:
        m = template.markers[cover_marker]
        c = (int((m.x + m.size / 2) * k), int((m.y + m.size / 2) * k))
        cv2.circle(sheet, c, int(m.size * 0.45 * k), PENCILS["blue"], -1)
    sw, sh = sheet.shape[1], sheet.shape[0]

    w, h = size
    # Page corners in the photo: a rotated, tilted rectangle filling ``fill`` of the frame.
    Wmm, Hmm = template.width_mm, template.height_mm
    aspect = Wmm / Hmm
    th = np.deg2rad(rotation_deg)
    c, s = np.cos(th), np.sin(th)
    ext_w = abs(c) * aspect + abs(s)
    ext_h = abs(s) * aspect + abs(c)
    unit = fill * min(w / ext_w, h / ext_h)
    base = np.array([[-aspect / 2, -0.5], [aspect / 2, -0.5], [aspect / 2, 0.5], [-aspect / 2, 0.5]]) * unit
    R = np.array([[c, -s], [s, c]])
    corners = base @ R.T + np.array([w / 2 + offset[0], h / 2 + offset[1]])
    corners += rng.uniform(-tilt, tilt, size=(4, 2)) * unit * 0.5
    page_mm = np.array([[0, 0], [Wmm, 0], [Wmm, Hmm], [0, Hmm]], float)
    Hmm2px = cv2.getPerspectiveTransform(page_mm.astype(np.float32), corners.astype(np.float32))

    # Background: a textured table.
    bg = rng.normal(0, 1, (h // 8 + 1, w // 8 + 1, 3)).astype(np.float32)
    bg = cv2.resize(cv2.GaussianBlur(bg, (0, 0), 2), (w, h))
    table = np.clip(110 + 25 * bg + np.array([20, 5, -15], np.float32), 0, 255)

    # Inverse map: photo px -> mm on the flat page -> undo the curl -> sheet px.
    jj, ii = np.meshgrid(np.arange(w, dtype=np.float64) + 0.5, np.arange(h, dtype=np.float64) + 0.5)
    q = project(np.linalg.inv(Hmm2px), np.stack([jj.ravel(), ii.ravel()], 1))
    m = q.copy()
    for _ in range(3):  # fixed point: m + curl(m) = q
        m = q - _curl(m, curl_mm, (Wmm, Hmm))
    mapx = (m[:, 0] * k - 0.5).reshape(h, w).astype(np.float32)
    mapy = (m[:, 1] * k - 0.5).reshape(h, w).astype(np.float32)
    paper = cv2.remap(sheet, mapx, mapy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                      borderValue=(0, 0, 0))
    inside = cv2.remap(np.full((sh, sw), 255, np.uint8), mapx, mapy, cv2.INTER_LINEAR,
                       borderMode=cv2.BORDER_CONSTANT, borderValue=0).astype(np.float32)[..., None] / 255
    img = paper.astype(np.float32) * inside + table * (1 - inside)
    # Light: a warm gradient and a soft shadow.
    gx = np.linspace(1 - shade, 1, w)[None, :, None]
    img = img * gx * np.array([1.0, 0.96, 0.88], np.float32)
    if blur_px > 0:
        img = cv2.GaussianBlur(img, (0, 0), blur_px)
    img = img + rng.normal(0, noise, img.shape)
    img = np.clip(img, 0, 255).astype(np.uint8)
    if jpeg_quality:
        ok, enc = cv2.imencode(".jpg", img[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
        img = cv2.imdecode(enc, cv2.IMREAD_COLOR)[..., ::-1].copy()
    # Photo px convention: the mm->px map above used pixel centres at +0.5 (jj, ii), so
    # Hmm2px is already in the project convention.
    out = SynthPhoto(image=img, homography=Hmm2px, curl_mm=float(curl_mm))
    object.__setattr__(out, "_page_wh", (Wmm, Hmm))
    return out
