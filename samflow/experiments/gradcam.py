"""Grad-CAM of the last convolutional layer, and where its mass lies.

Grad-CAM (Selvaraju et al., ICCV 2017): for feature maps `A_k` (the ReLU output
of the last convolution) and a class score `s`,

    w_k = mean_{i,j} ds/dA_k[i,j],     cam = ReLU(sum_k w_k A_k),

upsampled bilinearly to the input size. The class score is the logit of the
true class: `y f(x)` for a binary task (one logit f, y in {-1, +1}) and
`logits[y]` for a multi-class one.

With a global-average-pooling head (`convnet.ConvNet`) `w_k` is the head weight
of channel k over h*w and the map is the class activation map of Zhou et al.
(CVPR 2016).

**Minor and major pixels.** A pixel is *major* when its raw intensity (in
[0, 1], the mean over colour channels) is at least a threshold (0.5 by
default: on MNIST, the bright strokes), and *minor* otherwise (dark background
and low-intensity pixels). `mass_shares` gives the fraction of a map's total
mass on each; a map that is zero everywhere has no share (NaN) and is counted.
A map spread evenly would put on the major pixels exactly their area fraction,
which `area_shares` returns as the baseline.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .convnet import ConvNet

__all__ = ["class_score", "gradcam", "gradcam_batch", "major_mask", "mass_shares", "area_shares"]


def class_score(logits: Float[Array, "..."], target) -> Float[Array, ""]:
    """The score Grad-CAM differentiates: `target * logits` for a scalar logit
    (target -1 or +1), `logits[target]` for a vector of logits."""
    if logits.ndim == 0:
        return target * logits
    return logits[target]


def gradcam(
    model: ConvNet, x: Float[Array, "C H W"], target, *, upsample: bool = True
) -> Float[Array, "H W"]:
    """The Grad-CAM map of one image for class `target` (see the module docstring).

    **Arguments:** `model` a `ConvNet`; `x` one image (C, H, W) as fed to the
    model; `target` the class (-1/+1 for a scalar logit, an index otherwise);
    `upsample` resize the (h, w) map to (H, W) bilinearly.

    **Returns:** a non-negative float32 map, (H, W) (or (h, w) without upsampling).
    """
    a = model.features(x)
    grads = jax.grad(lambda a_: class_score(model.logits_from_features(a_), target))(a)
    weights = jnp.mean(grads, axis=(1, 2))
    cam = jax.nn.relu(jnp.einsum("k,khw->hw", weights, a))
    if upsample and cam.shape != x.shape[1:]:
        cam = jax.image.resize(cam, x.shape[1:], method="bilinear")
        cam = jnp.maximum(cam, 0.0)
    return cam.astype(jnp.float32)


@eqx.filter_jit
def gradcam_batch(model: ConvNet, xs: Float[Array, "n C H W"], targets) -> Float[Array, "n H W"]:
    """`gradcam` over a batch of images (upsampled to the input size)."""
    return jax.vmap(lambda x, t: gradcam(model, x, t))(xs, targets)


def major_mask(intensity: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Boolean mask of the major pixels: raw intensity >= `threshold`."""
    return np.asarray(intensity) >= threshold


def mass_shares(cams: np.ndarray, major: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Share of each map's mass on the major pixels, and which maps are all zero.

    **Arguments:** `cams` (n, H, W) non-negative maps; `major` (n, H, W) booleans.

    **Returns:** `(major_share, zero)`: (n,) floats in [0, 1], NaN where the map
    is zero everywhere; (n,) booleans marking those maps. The minor share is
    `1 - major_share`.

    **Raises:** `ValueError` when a map holds NaN or inf (a non-finite model's
    map is not a zero map and has no share).
    """
    cams = np.asarray(cams, dtype=np.float64)
    finite = np.isfinite(cams).all(axis=(1, 2))
    if not finite.all():
        raise ValueError(
            f"mass_shares: {int((~finite).sum())} of {len(cams)} Grad-CAM maps hold NaN or inf "
            f"(first: map {int(np.flatnonzero(~finite)[0])}); measure only finite models"
        )
    total = cams.sum(axis=(1, 2))
    on_major = (cams * major).sum(axis=(1, 2))
    zero = ~(total > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(zero, np.nan, on_major / np.where(zero, 1.0, total))
    return share, zero


def area_shares(major: np.ndarray) -> np.ndarray:
    """Fraction of each image's pixels that are major, (n,): the share a uniform map would give."""
    return np.asarray(major, dtype=np.float64).mean(axis=(1, 2))
