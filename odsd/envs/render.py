"""Batched torch rasterization of flat, axis-aligned scenes seen from straight above.

Every camera here looks straight down (-z), so a horizontal plane at height ``h`` maps to the
image by an axis-aligned affine map: pixel column ``j`` sees world ``x = xs[row, j]`` and pixel
row ``i`` sees ``y = ys[row, i]``. An axis-aligned rectangle on that plane is then the outer
product of a column mask and a row mask, and a disc the outer sum of two 1-D squares; painting a
whole batch costs a few elementwise passes over ``[n, H, W]`` and no Python loop over rows::

    camera = OrthoCamera(height=96, width=96, half_extent=0.33, eye_z=0.5, device="cpu")
    canvas = Canvas(n, 96, 96, camera.depth(torch.zeros(n)), device="cpu", with_depth=True)
    canvas.paint(rect_mask(camera, h, x0, x1, y0, y1), object_id=2, depth=camera.depth(h))
    rgb = canvas.rgb(palette, shade)            # [n, 96, 96, 3] uint8
    depth = canvas.depth_mm()                   # [n, 96, 96, 1] uint16 millimetres

Masks are float32 tensors of 0 and 1 rather than bool: on CPU, torch's elementwise arithmetic is
vectorized and its bool comparisons and logic are not (about 10x slower at these sizes).

Image convention: column index grows with world +x, row index grows with world -y (image up is
world +y), as seen from above.
"""

from __future__ import annotations

import torch

SHADE_RANGE = (0.4, 1.2)
SHADE_LEVELS = 81
"""Shading is quantized to steps of 0.01 in ``SHADE_RANGE``, so colors come from one table lookup."""


def pixel_centers(count: int, device: torch.device | str) -> torch.Tensor:
    """``[count]`` pixel centres in ``(-1, 1)``, increasing: ``-1 + (2k + 1) / count``."""
    return (torch.arange(count, device=device, dtype=torch.float32) * 2 + 1) / count - 1


class OrthoCamera:
    """Orthographic camera centred on the origin, its eye at height ``eye_z``.

    Pixels are square; the shorter image side spans ``[-half_extent, half_extent]``.
    """

    def __init__(
        self, height: int, width: int, half_extent: float, eye_z: float, device: torch.device | str
    ) -> None:
        self.eye_z = eye_z
        pixel = 2 * half_extent / min(height, width)
        self._xs = pixel_centers(width, device) * (pixel * width / 2)
        self._ys = -pixel_centers(height, device) * (pixel * height / 2)

    def coords(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World ``x`` per column ``[n, W]`` and ``y`` per row ``[n, H]`` on the planes ``h`` ``[n]``."""
        n = h.shape[0]
        return self._xs.expand(n, -1), self._ys.expand(n, -1)

    def depth(self, h: torch.Tensor) -> torch.Tensor:
        """Distance ``[n]`` (m, along the view axis) from the eye to the planes ``h``."""
        return self.eye_z - h


class DownCamera:
    """Pinhole camera looking straight down from ``eye`` ``[n, 3]`` (one per row).

    ``tan_half_fov`` is the tangent of half the horizontal field of view; pixels are square.
    ``u`` ``[W]`` and ``v`` ``[H]`` are the pixel centres' ray slopes (x and y per metre of depth).
    """

    def __init__(
        self, height: int, width: int, tan_half_fov: float, eye: torch.Tensor, device: torch.device | str
    ) -> None:
        self.eye = eye
        self.u = pixel_centers(width, device) * tan_half_fov
        self.v = -pixel_centers(height, device) * tan_half_fov * (height / width)

    def coords(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World ``x`` per column ``[n, W]`` and ``y`` per row ``[n, H]`` on the planes ``h`` ``[n]``."""
        d = (self.eye[:, 2] - h).unsqueeze(1)
        return self.eye[:, 0:1] + self.u * d, self.eye[:, 1:2] + self.v * d

    def depth(self, h: torch.Tensor) -> torch.Tensor:
        """Distance ``[n]`` (m, along the view axis) from the eye to the planes ``h``."""
        return self.eye[:, 2] - h


Camera = OrthoCamera | DownCamera


def nonneg(value: torch.Tensor) -> torch.Tensor:
    """Float mask (0/1) of ``value >= 0``, by arithmetic only."""
    return (value.sign() + 1).clamp_(max=1)


def span(coord: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Float mask of ``lo <= coord <= hi`` per row: ``coord [n, L]``, bounds ``[n]`` → ``[n, L]``."""
    return ((coord >= lo.unsqueeze(1)) & (coord <= hi.unsqueeze(1))).to(torch.float32)


def rect_mask(
    camera: Camera,
    h: torch.Tensor,
    x0: torch.Tensor,
    x1: torch.Tensor,
    y0: torch.Tensor,
    y1: torch.Tensor,
) -> torch.Tensor:
    """``[n, H, W]`` mask of the pixels that see ``[x0, x1] × [y0, y1]`` on the planes ``h``."""
    xs, ys = camera.coords(h)
    return span(ys, y0, y1).unsqueeze(2) * span(xs, x0, x1).unsqueeze(1)


def square_mask(camera: Camera, h: torch.Tensor, center: torch.Tensor, half: float) -> torch.Tensor:
    """``[n, H, W]`` mask of the square of half side ``half`` around ``center`` ``[n, 2]``."""
    x, y = center[:, 0], center[:, 1]
    return rect_mask(camera, h, x - half, x + half, y - half, y + half)


def radius2(camera: Camera, h: torch.Tensor, center: torch.Tensor) -> torch.Tensor:
    """``[n, H, W]`` squared distance on the planes ``h`` from each pixel's point to ``center``."""
    xs, ys = camera.coords(h)
    dx = (xs - center[:, 0:1]).square()
    dy = (ys - center[:, 1:2]).square()
    return dy.unsqueeze(2) + dx.unsqueeze(1)


class Canvas:
    """Painter's-order compositing by object id (and optionally depth) for a batch of frames.

    Each pixel shows the *highest* id painted on it, so number objects back to front. Colors
    are applied once at the end, by one table lookup of (row, id, shade level) per pixel.
    """

    def __init__(
        self,
        n: int,
        height: int,
        width: int,
        background_depth: torch.Tensor,
        *,
        device: torch.device | str,
        with_depth: bool,
    ) -> None:
        self.ids = torch.zeros((n, height, width), dtype=torch.float32, device=device)
        self.depth: torch.Tensor | None = None
        if with_depth:
            self.depth = background_depth.view(n, 1, 1).expand(n, height, width).clone()

    def paint(self, mask: torch.Tensor, object_id: int, depth: torch.Tensor | None = None) -> None:
        """Paint ``object_id`` where ``mask`` (0/1, ``[n, H, W]``); ``depth`` ``[n]`` or ``[n, H, W]`` (m)."""
        torch.maximum(self.ids, mask * object_id, out=self.ids)
        if self.depth is not None and depth is not None:
            value = depth.view(-1, 1, 1) if depth.dim() == 1 else depth
            self.depth = self.depth + mask * (value - self.depth)

    def rgb(self, palette: torch.Tensor, shade: torch.Tensor | None = None, shaded: int = 0) -> torch.Tensor:
        """``[n, H, W, 3]`` uint8: ``palette`` ``[n, K, 3]`` (in ``[0, 1]``) times ``shade`` ``[n, H, W]``.

        Only ids ``<= shaded`` are shaded (the background and what lies on it); ``shade`` is
        clamped to :data:`SHADE_RANGE` and quantized to :data:`SHADE_LEVELS` steps.
        """
        n, h, w = self.ids.shape
        k = palette.shape[1]
        lo, hi = SHADE_RANGE
        levels = torch.linspace(lo, hi, SHADE_LEVELS, device=palette.device)
        factor = torch.where(
            torch.arange(k, device=palette.device).view(k, 1) <= shaded, levels, torch.ones_like(levels)
        )
        table = (palette.unsqueeze(2) * factor.view(1, k, SHADE_LEVELS, 1) * 255).round_().clamp_(0, 255)
        table = table.to(torch.uint8).view(n * k * SHADE_LEVELS, 3)
        local = self.ids * SHADE_LEVELS
        if shade is None:
            local += round((1.0 - lo) / (hi - lo) * (SHADE_LEVELS - 1))
        else:
            local += ((shade - lo) * ((SHADE_LEVELS - 1) / (hi - lo))).clamp_(0, SHADE_LEVELS - 1).round_()
        rows = torch.arange(
            0, n * k * SHADE_LEVELS, k * SHADE_LEVELS, device=palette.device, dtype=torch.int32
        )
        index = local.to(torch.int32) + rows.view(n, 1, 1)
        return table.index_select(0, index.view(-1)).view(n, h, w, 3)

    def depth_mm(self) -> torch.Tensor:
        """``[n, H, W, 1]`` uint16 depth in millimetres (only with ``with_depth=True``)."""
        assert self.depth is not None, "canvas was made without depth"
        return (self.depth * 1000).round_().clamp_(0, 65535).to(torch.uint16).unsqueeze(3)
