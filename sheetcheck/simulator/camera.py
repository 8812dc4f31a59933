"""Photo formation: a flat painted sheet -> a phone photo of it lying on a table.

The camera is an explicit pinhole model, so the truth is exact: the page (template mm, centred)
is bent by a curl/fold height field, rotated in its plane and tilted, placed at a distance in
front of a camera with a 35 mm-equivalent focal length, projected, and then distorted by a radial
lens model. The homography of the flat page (height 0) is composed analytically
(``K [r1 r2 t] T``); curled pages and lens distortion are recorded by mapping points through the
full model (:meth:`PageCamera.forward`).

The photo is made with one ``cv2.remap`` from a combined map (photo px -> sheet px) that is
computed on a coarse grid and interpolated, then light, colour cast, blur, sensor noise and
sharpening are applied in linear light, and the result is encoded as JPEG by the caller.

Conventions: points are ``(N, 2)`` (x, y); pixel ``(i, j)`` of any image is centred at
``(j + 0.5, i + 0.5)``; OpenCV puts pixel centres at integers, hence the ``0.5`` shifts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from sheetcheck.simulator.backgrounds import make_background
from sheetcheck.simulator.paint import _TO_LIN_LUT, linear_to_srgb

_DIAG_35MM = math.hypot(36.0, 24.0)  # the 35 mm film diagonal that "equivalent focal length" refers to


def _rodrigues(axis: np.ndarray, angle: float) -> np.ndarray:
    r, _ = cv2.Rodrigues(np.asarray(axis, float) * angle)
    return r


@dataclass
class PageCamera:
    """The geometry of one photo: page pose, pinhole camera, curl and lens distortion.

    Parameters are the sampled conditions (see ``presets.py``). After construction the page is
    fitted into the frame: the distance and the principal point are adjusted so that the page
    (curl and distortion included) fills ``fill`` of the frame at the requested offset.
    """

    page_mm: tuple[float, float]
    size: tuple[int, int]
    rotation_deg: float
    tilt_deg: float
    tilt_axis_deg: float
    focal_35mm: float
    fill: float
    offset: tuple[float, float]
    k1: float
    k2: float
    curl: dict
    cutoff: float = 0.0
    cutoff_corner: int = 0

    def __post_init__(self):
        W, H = self.size
        pw, ph = self.page_mm
        self.f = self.focal_35mm / _DIAG_35MM * math.hypot(W, H)
        self.centre = np.array([W / 2.0, H / 2.0])  # distortion centre
        rz = _rodrigues([0, 0, 1], math.radians(self.rotation_deg))
        ax = math.radians(self.tilt_axis_deg)
        rt = _rodrigues([math.cos(ax), math.sin(ax), 0.0], math.radians(self.tilt_deg))
        self.R = rt @ rz
        self.D = self.f * max(pw, ph) / (self.fill * min(W, H))
        self.pp = self.centre.copy()  # principal point
        t = np.linspace(0, 1, 24)
        edge = np.concatenate([np.stack([t * pw, 0 * t], 1), np.stack([pw + 0 * t, t * ph], 1),
                               np.stack([(1 - t) * pw, ph + 0 * t], 1), np.stack([0 * t, (1 - t) * ph], 1)])
        for _ in range(8):
            p = self.forward(edge)
            lo, hi = p.min(0), p.max(0)
            bw, bh = hi - lo
            s = min(self.fill * W / bw, self.fill * H / bh)
            self.D /= s
            p = self.forward(edge)
            lo, hi = p.min(0), p.max(0)
            bw, bh = hi - lo
            want = np.array([W / 2 + self.offset[0] * (W - bw) / 2, H / 2 + self.offset[1] * (H - bh) / 2])
            self.pp = self.pp + (want - (lo + hi) / 2)
        if self.cutoff > 0:
            # push the page past one frame corner until `cutoff` of its width/height is out
            sx, sy = [(-1, -1), (1, -1), (1, 1), (-1, 1)][self.cutoff_corner % 4]
            p = self.forward(edge)
            lo, hi = p.min(0), p.max(0)
            bw, bh = hi - lo
            dx = (-self.cutoff * bw - lo[0]) if sx < 0 else (W + self.cutoff * bw - hi[0])
            dy = (-self.cutoff * bh - lo[1]) if sy < 0 else (H + self.cutoff * bh - hi[1])
            self.pp = self.pp + [dx, dy]

    # ---- geometry ----------------------------------------------------------------------
    def height_mm(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Height of the page above the table (mm) at page points ``x, y`` (mm)."""
        c = self.curl
        kind = c.get("type", "none")
        if kind == "none" or not c.get("amount_mm"):
            return np.zeros(np.broadcast(x, y).shape)
        pw, ph = self.page_mm
        t, length = (x, pw) if c.get("axis", "x") == "x" else (y, ph)
        pos = c.get("position", 0.5) * length
        amount = c["amount_mm"]
        if kind == "bend":
            # the page lifts from the bend line towards one edge (a curled page corner/edge)
            if c.get("side", 1) >= 0:
                u = np.clip((t - pos) / max(length - pos, 1e-6), 0, None)
            else:
                u = np.clip((pos - t) / max(pos, 1e-6), 0, None)
            return amount * u ** 2
        if kind == "fold":
            # a crease: a sharp ridge along the fold line, flat again beyond fold_width_mm
            w = c.get("width_mm", 60.0)
            return amount * np.clip(1 - np.abs(t - pos) / w, 0, None) ** 2
        raise ValueError(f"unknown curl type {kind!r}")

    def _project(self, mm: np.ndarray, z: np.ndarray | None = None) -> np.ndarray:
        """Page mm (+ height) -> undistorted photo px."""
        pw, ph = self.page_mm
        x, y = mm[..., 0], mm[..., 1]
        if z is None:
            z = self.height_mm(x, y)
        P = np.stack([x - pw / 2, y - ph / 2, -z], -1)
        C = P @ self.R.T + [0, 0, self.D]
        zc = np.maximum(C[..., 2], 1e-6)
        return np.stack([self.f * C[..., 0] / zc + self.pp[0], self.f * C[..., 1] / zc + self.pp[1]], -1)

    def distort(self, p: np.ndarray) -> np.ndarray:
        """Ideal (pinhole) px -> px as the lens delivers them (radial k1, k2)."""
        if not (self.k1 or self.k2):
            return p
        n = (p - self.centre) / self.f
        r2 = (n ** 2).sum(-1, keepdims=True)
        return self.centre + self.f * n * (1 + self.k1 * r2 + self.k2 * r2 ** 2)

    def undistort(self, p: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`distort` (fixed-point iteration; converges for phone lenses)."""
        if not (self.k1 or self.k2):
            return p
        nd = (p - self.centre) / self.f
        n = nd.copy()
        for _ in range(12):
            r2 = (n ** 2).sum(-1, keepdims=True)
            n = nd / (1 + self.k1 * r2 + self.k2 * r2 ** 2)
        return self.centre + self.f * n

    def forward(self, mm: np.ndarray) -> np.ndarray:
        """Template mm ``(N, 2)`` -> photo px ``(N, 2)`` through the full model."""
        return self.distort(self._project(np.asarray(mm, float)))

    @property
    def homography(self) -> np.ndarray:
        """3x3, template mm -> photo px for the flat page without lens distortion."""
        pw, ph = self.page_mm
        K = np.array([[self.f, 0, self.pp[0]], [0, self.f, self.pp[1]], [0, 0, 1.0]])
        T = np.array([[1, 0, -pw / 2], [0, 1, -ph / 2], [0, 0, 1.0]])
        M = np.column_stack([self.R[:, 0], self.R[:, 1], [0, 0, self.D]])
        Hm = K @ M @ T
        return Hm / Hm[2, 2]

    def inverse(self, p: np.ndarray) -> np.ndarray:
        """Photo px -> template mm (the page point seen there; curl by fixed-point iteration)."""
        pu = self.undistort(np.asarray(p, float))
        Hi = np.linalg.inv(self.homography)

        def h_inv(q):
            v = q @ Hi[:, :2].T + Hi[:, 2]
            return v[..., :2] / v[..., 2:3]

        target = h_inv(pu)
        mm = target.copy()
        if self.curl.get("type", "none") != "none" and self.curl.get("amount_mm"):
            for _ in range(10):
                mm = mm + (target - h_inv(self._project(mm)))
        return mm

    def max_px_per_mm(self) -> float:
        """The finest sampling of the page in the photo (px per mm), over the page."""
        pw, ph = self.page_mm
        g = np.stack(np.meshgrid(np.linspace(0, pw, 7), np.linspace(0, ph, 7)), -1).reshape(-1, 2)
        e = 0.5
        a = self.forward(g)
        jx = (self.forward(g + [e, 0]) - a) / e
        jy = (self.forward(g + [0, e]) - a) / e
        return float(np.max(np.maximum(np.hypot(*jx.T), np.hypot(*jy.T))))


# --------------------------------------------------------------------------------------------
# maps and image formation
# --------------------------------------------------------------------------------------------

def _coarse_grid(W: int, H: int, step: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Photo points (x, y) at which the coarse map is sampled; see :func:`_upsample`."""
    nx, ny = -(-W // step) + 2, -(-H // step) + 2
    xs = (np.arange(nx) - 1 + 0.5) * step
    ys = (np.arange(ny) - 1 + 0.5) * step
    return np.stack(np.meshgrid(xs, ys), -1), (nx, ny)


def _upsample(coarse: np.ndarray, W: int, H: int, step: int) -> np.ndarray:
    """Bilinear interpolation of a coarse field sampled by :func:`_coarse_grid` to (H, W).

    Sample ``k`` (from -1) sits at pixel centre ``(k + 0.5) * step``; with cv2.resize's
    half-pixel alignment and a crop of one ``step`` this reproduces exact bilinear
    interpolation, with no clamped border.
    """
    ny, nx = coarse.shape[:2]
    up = cv2.resize(coarse.astype(np.float32), (nx * step, ny * step), interpolation=cv2.INTER_LINEAR)
    return up[step:step + H, step:step + W]


def colour_temperature_rgb(kelvin: float) -> np.ndarray:
    """Linear RGB of a black-body illuminant at ``kelvin``, normalised to green = 1.

    Uses Tanner Helland's fit to the Planckian locus in sRGB (good to a few percent from
    1000 K to 40000 K), which is all the white-balance error model needs.
    """
    t = kelvin / 100.0
    r = 255.0 if t <= 66 else 329.698727446 * (t - 60) ** -0.1332047592
    g = (99.4708025861 * math.log(t) - 161.1195681661) if t <= 66 else 288.1221695283 * (t - 60) ** -0.0755148492
    b = 255.0 if t >= 66 else (0.0 if t <= 19 else 138.5177312231 * math.log(t - 10) - 305.0447927307)
    srgb = np.clip(np.array([r, g, b]) / 255.0, 1e-3, 1)
    lin = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    return (lin / lin[1]).astype(np.float32)


def _blur_kernel(defocus_px: float, motion_px: float, motion_angle_deg: float,
                 sigma_px: float = 0.0) -> np.ndarray | None:
    """Point-spread function: lens softness (Gaussian ``sigma_px``) * defocus (disk) * motion
    (line), or None if negligible."""
    if defocus_px < 0.5 and motion_px < 1.0 and sigma_px < 0.3:
        return None
    r = int(math.ceil(defocus_px + motion_px / 2 + 2.5 * sigma_px)) + 1
    n = 2 * r + 1
    sh = 4
    psf = np.zeros((n, n), np.float32)
    if defocus_px >= 0.5:
        cv2.circle(psf, (r << sh, r << sh), int(defocus_px * (1 << sh)), 1.0, -1, cv2.LINE_AA, sh)
    else:
        psf[r, r] = 1
    if motion_px >= 1.0:
        line = np.zeros((n, n), np.float32)
        a = math.radians(motion_angle_deg)
        dx, dy = math.cos(a) * motion_px / 2, math.sin(a) * motion_px / 2
        cv2.line(line, (int((r - dx) * 16), int((r - dy) * 16)), (int((r + dx) * 16), int((r + dy) * 16)),
                 1.0, 1, cv2.LINE_AA, sh)
        line /= line.sum()
        psf = cv2.filter2D(psf, -1, line, borderType=cv2.BORDER_CONSTANT)
    if sigma_px >= 0.3:
        psf = cv2.GaussianBlur(psf, (0, 0), sigma_px, borderType=cv2.BORDER_CONSTANT)
    return psf / psf.sum()


def _shadow_polygon(W: int, H: int, rng) -> np.ndarray:
    """A hand or phone shadow: a rounded blob that enters the frame from one side, (N, 2) px."""
    side = int(rng.integers(4))
    t = rng.uniform(0.15, 0.85)
    anchor = [np.array([t * W, 0]), np.array([W, t * H]), np.array([t * W, H]), np.array([0, t * H])][side]
    inward = [np.array([0, 1]), np.array([-1, 0]), np.array([0, -1]), np.array([1, 0])][side]
    length = rng.uniform(0.3, 0.75) * (H if side in (0, 2) else W)
    width = rng.uniform(0.15, 0.4) * min(W, H)
    c = anchor + inward * length / 2
    ang = math.atan2(inward[1], inward[0]) + rng.normal(0, 0.4)
    th = np.linspace(0, 2 * math.pi, 40, endpoint=False)
    rad = 1 + 0.12 * np.sin(3 * th + rng.uniform(0, 6)) + 0.06 * np.sin(5 * th + rng.uniform(0, 6))
    pts = np.stack([np.cos(th) * length * 0.75 * rad, np.sin(th) * width / 2 * rad], 1)
    rot = np.array([[math.cos(ang), -math.sin(ang)], [math.sin(ang), math.cos(ang)]])
    return pts @ rot.T + c


def photograph(sheet_rgb: np.ndarray, *, dpi: float, cam: PageCamera, cond: dict,
               rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """Photograph a flat painted sheet.

    Parameters
    ----------
    sheet_rgb : (h, w, 3) uint8 ndarray
        The painted sheet in the template frame at ``dpi``.
    dpi : float
    cam : PageCamera
        The geometry (fixes the output size).
    cond : dict
        The sampled conditions (light, colour, noise, blur, background ...).
    rng : numpy Generator

    Returns
    -------
    image : (H, W, 3) uint8 ndarray
        The photo (RGB, before JPEG).
    extras : dict
        Derived conditions to record (background crop, shadow polygon, colour cast ...).
    """
    W, H = cam.size
    pw, ph = cam.page_mm
    s = dpi / 25.4
    # the map is smooth (a homography, a gentle curl, a radial lens): a coarse grid is exact
    # to a small fraction of a pixel and saves most of the work on big photos
    step = 8 if W * H <= 4_000_000 else 16
    grid, (nx, ny) = _coarse_grid(W, H, step)
    mm = cam.inverse(grid.reshape(-1, 2)).reshape(ny, nx, 2)
    extras: dict = {}

    # page shading from the surface normal of a curled/folded page
    shade_c = None
    if cam.curl.get("type", "none") != "none" and cam.curl.get("amount_mm"):
        x, y = mm[..., 0], mm[..., 1]
        e = 0.5
        zx = (cam.height_mm(x + e, y) - cam.height_mm(x - e, y)) / (2 * e)
        zy = (cam.height_mm(x, y + e) - cam.height_mm(x, y - e)) / (2 * e)
        la = math.radians(cond["light_angle_deg"])
        elev = math.radians(50)
        L = np.array([math.cos(la) * math.sin(elev), math.sin(la) * math.sin(elev), math.cos(elev)])
        n = np.stack([-zx, -zy, np.ones_like(zx)], -1)
        n /= np.linalg.norm(n, axis=-1, keepdims=True)
        shade_c = np.clip((n @ L) / L[2], 0.4, 1.4)

    maps = _upsample(mm * s - 0.5, W, H, step)  # (H, W, 2) sheet px in cv2 convention
    # the sheet with an opaque alpha channel, remapped against a transparent border: the
    # result is premultiplied colour with an anti-aliased page outline, in one remap
    rgba = np.dstack([sheet_rgb, np.full(sheet_rgb.shape[:2], 255, np.uint8)])
    page = cv2.remap(rgba, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0, 0))
    del maps, rgba
    alpha = page[..., 3].astype(np.float32)
    alpha *= 1 / 255.0
    # the colour stays premultiplied: partly covered edge pixels come out a little darker,
    # which is how the cut edge of a sheet of paper looks in a photo
    img = _TO_LIN_LUT[page[..., :3]]
    del page
    img *= np.asarray(cond["paper_tint"], np.float32)

    bg, bgp = make_background(cond["background"], (W, H), rng)
    extras["background"] = bgp
    # the page casts a soft shadow onto the table and shows a slightly darker paper edge
    ps = cond["page_shadow"]
    if ps > 0:
        off = max(1.0, 0.004 * max(W, H))
        ang = math.radians(cond["light_angle_deg"] + 180)
        k = 4  # a soft shadow: made at quarter size
        small = cv2.resize(alpha, (W // k + 1, H // k + 1), interpolation=cv2.INTER_AREA)
        M = np.float32([[1, 0, off / k * math.cos(ang)], [0, 1, off / k * math.sin(ang)]])
        sh = cv2.warpAffine(small, M, small.shape[::-1])
        sh = cv2.GaussianBlur(sh, (0, 0), max(0.7, off * 1.5 / k))
        sh = cv2.resize(sh, ((W // k + 1) * k, (H // k + 1) * k), interpolation=cv2.INTER_LINEAR)[:H, :W]
        sh *= ps
        np.subtract(1, sh, out=sh)
        bg *= sh[..., None]
    bg *= (1 - alpha)[..., None]
    img += bg
    del bg

    # light: gradient, vignetting, cast shadow, curl shading, exposure
    light = _light_field(W, H, cond, rng, extras, step)
    if shade_c is not None:
        shade = _upsample(shade_c[..., None], W, H, step)
        if shade.ndim == 3:
            shade = shade[..., 0]
        light *= 1 + (shade - 1) * alpha
    cast = colour_temperature_rgb(cond["colour_temp_k"]) ** (1 - cond["awb"])
    cast = cast * np.array([cond["wb_gain_r"], 1.0, cond["wb_gain_b"]], np.float32)
    extras["colour_cast"] = [round(float(c), 4) for c in cast]
    light = light[..., None] * (cast * cond["exposure"]).astype(np.float32)
    img *= light
    del light
    if cond.get("glare", 0) > 0:
        # a lamp reflected in the paper: a soft bright patch that washes out pencil and ink
        g = _glare_mask(W, H, rng, extras)
        g *= cond["glare"]
        img += g[..., None] * (cast * cond["exposure"]).astype(np.float32)
        del g

    # optics: baseline softness, defocus and motion blur, as one point-spread function
    k = _blur_kernel(cond["defocus_px"], cond["motion_px"], cond["motion_angle_deg"],
                     cond["optics_sigma_px"])
    if k is not None:
        img = cv2.filter2D(img, -1, k, borderType=cv2.BORDER_REFLECT)
    if cond.get("dof_blur_px", 0) > 0:
        # shallow depth of field: focused on the page centre, parts nearer or farther (a
        # steeply tilted page, the table beyond it) get softer with their distance from it
        depth = _depth_field(cam, mm)
        w = _upsample(np.clip(np.abs(depth / cam.D - 1) / 0.12, 0, 1)[..., None], W, H, step)
        if w.ndim == 3:
            w = w[..., 0]
        soft = cv2.GaussianBlur(img, (0, 0), cond["dof_blur_px"])
        soft -= img
        soft *= w[..., None]
        img += soft
        del soft, w

    # sensor: shot noise (grows with signal) + read noise (dominates in the dark)
    np.clip(img, 0, 1, out=img)
    small = W * H > 4_000_000
    # big sensors' noise, after the phone's denoiser, is blotchy rather than per-pixel
    nh, nw = (H // 2 + 1, W // 2 + 1) if small else (H, W)
    n = rng.standard_normal((nh, nw, 3), dtype=np.float32)
    if small:
        n = cv2.resize(n, (nw * 2, nh * 2), interpolation=cv2.INTER_LINEAR)[:H, :W]
        n *= 1.3
    sigma = img * cond["shot_noise"]
    sigma += cond["read_noise"] ** 2
    np.sqrt(sigma, out=sigma)
    sigma *= n
    img += sigma
    del sigma, n
    out = _tone_lut(cond.get("tone_contrast", 0.0))[_quantise(img)]
    del img
    if cond["sharpen"] > 0:
        soft = cv2.GaussianBlur(out, (0, 0), 1.2)
        out = cv2.addWeighted(out, 1 + cond["sharpen"], soft, -cond["sharpen"], 0)
    sat = cond.get("saturation", 1.0)
    if abs(sat - 1.0) > 1e-3:
        # the phone's colour "pop": scale chroma around grey (Y kept, Cr/Cb stretched)
        ycc = cv2.cvtColor(out, cv2.COLOR_RGB2YCrCb)
        i = np.arange(256, dtype=np.float32)
        chroma = np.clip(128 + sat * (i - 128) + 0.5, 0, 255).astype(np.uint8)
        lut = np.stack([np.arange(256, dtype=np.uint8), chroma, chroma], 1).reshape(256, 1, 3)
        out = cv2.cvtColor(cv2.LUT(ycc, lut), cv2.COLOR_YCrCb2RGB)
    return out, extras


def _quantise(lin: np.ndarray) -> np.ndarray:
    """Linear [0, 1] float -> uint16 index 0..4095 (clipped)."""
    q = np.clip(lin, 0, 1)
    q *= 4095
    q += 0.5
    return q.astype(np.uint16)


def _tone_lut(strength: float) -> np.ndarray:
    """4096-entry table linear -> sRGB uint8 with the phone's tone curve: an S-curve of
    ``strength`` (0 none .. 1 strong) mixed into the sRGB encoding (deeper shadows, brighter
    paper, highlights rolling off instead of clipping hard)."""
    srgb = linear_to_srgb(np.linspace(0, 1, 4096))
    if strength > 0:
        k = 6.0
        sig = lambda x: 1 / (1 + np.exp(-k * (x - 0.5)))
        s_curve = (sig(srgb) - sig(0.0)) / (sig(1.0) - sig(0.0))
        srgb = (1 - strength) * srgb + strength * s_curve
    return (np.clip(srgb, 0, 1) * 255 + 0.5).astype(np.uint8)


def _depth_field(cam: PageCamera, mm: np.ndarray) -> np.ndarray:
    """Camera-space depth (mm) of the page point (or table plane) seen at each coarse sample."""
    pw, ph = cam.page_mm
    z = cam.height_mm(mm[..., 0], mm[..., 1])
    P = np.stack([mm[..., 0] - pw / 2, mm[..., 1] - ph / 2, -z], -1)
    return (P @ cam.R.T)[..., 2] + cam.D


def _glare_mask(W, H, rng, extras) -> np.ndarray:
    """A soft elliptical highlight, (H, W) float32 peaking at 1."""
    cx, cy = rng.uniform(0.15, 0.85) * W, rng.uniform(0.15, 0.85) * H
    a, b = rng.uniform(0.06, 0.22) * max(W, H), rng.uniform(0.04, 0.12) * max(W, H)
    ang = rng.uniform(0, math.pi)
    k = 4
    ys, xs = np.mgrid[0:H // k + 1, 0:W // k + 1].astype(np.float32) * k + k / 2
    u = (xs - cx) * math.cos(ang) + (ys - cy) * math.sin(ang)
    v = -(xs - cx) * math.sin(ang) + (ys - cy) * math.cos(ang)
    m = np.exp(-((u / a) ** 2 + (v / b) ** 2) * 2.0).astype(np.float32)
    extras["glare_ellipse_px"] = [round(cx, 1), round(cy, 1), round(a, 1), round(b, 1),
                                  round(math.degrees(ang), 1)]
    return cv2.resize(m, ((W // k + 1) * k, (H // k + 1) * k), interpolation=cv2.INTER_LINEAR)[:H, :W]


def _light_field(W, H, cond, rng, extras, step) -> np.ndarray:
    """Multiplicative light over the frame (float32 (H, W)), computed coarse and upsampled."""
    grid, _ = _coarse_grid(W, H, step * 4)
    x, y = grid[..., 0], grid[..., 1]
    diag = math.hypot(W, H)
    la = math.radians(cond["light_angle_deg"])
    g = ((x - W / 2) * math.cos(la) + (y - H / 2) * math.sin(la)) / diag
    light = 1 + cond["light_gradient"] * 2 * g
    r2 = ((x - W / 2) ** 2 + (y - H / 2) ** 2) / (diag / 2) ** 2
    light *= 1 - cond["vignette"] * r2
    light = _upsample(light[..., None], W, H, step * 4)
    if light.ndim == 3:
        light = light[..., 0]
    light = np.ascontiguousarray(light)
    if cond["shadow"] > 0:
        poly = _shadow_polygon(W, H, rng)
        k = 4  # draw the soft shadow at quarter size: it is blurred anyway
        m = np.zeros((H // k + 1, W // k + 1), np.float32)
        cv2.fillPoly(m, [np.round((poly / k - 0.5) * 16).astype(np.int32)], 1.0, cv2.LINE_AA, 4)
        soft = max(1.0, cond["shadow_softness"] * min(W, H) / k)
        m = cv2.GaussianBlur(m, (0, 0), soft)
        m = cv2.resize(m, ((W // k + 1) * k, (H // k + 1) * k), interpolation=cv2.INTER_LINEAR)[:H, :W]
        light *= 1 - cond["shadow"] * m
        extras["shadow_polygon_px"] = np.round(poly, 1).tolist()
    return np.clip(light, 0.05, 2.0).astype(np.float32)
