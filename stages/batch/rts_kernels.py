"""The two sequential loops of fusion's Kalman filter and Rauch-Tung-Striebel smoother, compiled.

``fuse_gnss_imu._smooth`` computes everything that does not depend on the previous step with
numpy; what does - the filter's update (its gating makes each step depend on the last) and the
smoother's recursion - runs here, compiled by numba to machine code. Each kernel runs a range of
steps and keeps its state in a small array between calls, so the caller can look for a
cancellation between ranges (a compiled loop cannot call back into Python cheaply).

The arithmetic is the per-step form's, operation for operation and in the same order: numba
compiles without fast-math, so no operation is reordered or fused and every value is the same
IEEE double the Python loop produced (``tests/unit/stages/batch/test_fuse_gnss_imu.py`` checks
them to the bit against the plain form). Measured on the 60-minute bench session
(``bench/lap_analysis.py`` fuses it): the two loops took 0.42 s of CPU in Python (cProfile
``tottime`` of ``_smooth``) and take about 0.01 s compiled.

Compiled code is cached beside this module (numba's ``cache=True``) so a process compiles once
per machine, not once per start (compiling takes about 2 s, loading the cache about 0.5 s). The
image sets ``NUMBA_CACHE_DIR`` under ``/tmp`` (its root file system is read-only in Kubernetes);
where numba finds no directory it may write, the kernels are compiled in memory instead.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from numba import njit

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["filter_steps", "smooth_steps"]


# Signatures given, so the kernels are compiled (or loaded from the cache) when this module is
# imported: by ``fuse_gnss_imu.warm_up`` as a worker starts, not in a session's first fusion.
_V = "float64[::1]"
_M = "float64[:, ::1]"


def _compiled(signature: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def compile_(fn: Callable[..., None]) -> Callable[..., None]:
        try:
            kernel: Callable[..., None] = njit(signature, cache=True, nogil=True)(fn)
        except RuntimeError:  # numba found no directory it may write its cache to (a read-only
            # file system without NUMBA_CACHE_DIR): compiled in memory, in every process
            kernel = njit(signature, nogil=True)(fn)
        return kernel

    return compile_


@_compiled(f"void(int64, int64, {', '.join([_V] * 11)}, float64, float64, {_V}, {_M}, {_M}, {_M},"
           f" {_V}, {_V}, boolean[::1])")  # fmt: skip
def filter_steps(
    lo: int,
    hi: int,
    el: FloatArray,
    nl: FloatArray,
    rl: FloatArray,
    wel: FloatArray,
    wnl: FloatArray,
    h: FloatArray,
    two_h: FloatArray,
    h_h: FloatArray,
    q_h3: FloatArray,
    q_h2: FloatArray,
    q_h: FloatArray,
    gate: float,
    rv: float,
    state: FloatArray,
    xf: FloatArray,
    pf: FloatArray,
    innov: FloatArray,
    s_out: FloatArray,
    nis_out: FloatArray,
    acc_out: BoolArray,
) -> None:
    """Forward filter over steps ``lo`` to ``hi - 1``. ``state`` holds x0..x3, P00, P01, P11
    and the count of consecutive rejected fixes, and is updated in place; step ``k`` writes
    row ``k`` of every output."""
    x0, x1, x2, x3 = state[0], state[1], state[2], state[3]
    a, b, d = state[4], state[5], state[6]
    rejects = int(state[7])
    for k in range(lo, hi):
        e_k, n_k, r_k, ve, vn = el[k], nl[k], rl[k], wel[k], wnl[k]
        if k:
            j = k - 1
            hk = h[j]
            x0, x2 = x0 + hk * x1, x2 + hk * x3
            a, b, d = a + two_h[j] * b + h_h[j] * d + q_h3[j], b + hk * d + q_h2[j], d + q_h[j]
        ie, inn = e_k - x0, n_k - x2
        s = a + r_k
        nis = (ie * ie + inn * inn) / s
        ok = nis <= gate or rejects >= 5 or k == 0
        if ok:
            k0, k1 = a / s, b / s
            x0, x1, x2, x3 = x0 + k0 * ie, x1 + k1 * ie, x2 + k0 * inn, x3 + k1 * inn
            a, b, d = (1 - k0) * a, (1 - k0) * b, d - k1 * b
            rejects = 0
        else:
            rejects += 1
        if ve == ve:  # not NaN: a velocity measurement, gated on its own NIS
            sv = d + rv
            ive, ivn = ve - x1, vn - x3
            if (ive * ive + ivn * ivn) / sv <= gate:
                k0, k1 = b / sv, d / sv
                x0, x1, x2, x3 = x0 + k0 * ive, x1 + k1 * ive, x2 + k0 * ivn, x3 + k1 * ivn
                a, b, d = a - k0 * b, b - k0 * d, d - k1 * d
        xf[k, 0], xf[k, 1], xf[k, 2], xf[k, 3] = x0, x1, x2, x3
        pf[k, 0], pf[k, 1], pf[k, 2] = a, b, d
        innov[k, 0], innov[k, 1] = ie, inn
        s_out[k], nis_out[k], acc_out[k] = s, nis, ok
    state[0], state[1], state[2], state[3] = x0, x1, x2, x3
    state[4], state[5], state[6], state[7] = a, b, d, rejects


@_compiled(f"void(int64, int64, {_M}, {_M}, {_M}, {_V}, {_M}, {_M})")
def smooth_steps(
    hi: int,
    lo: int,
    gains: FloatArray,
    predicted: FloatArray,
    filtered: FloatArray,
    state: FloatArray,
    xs: FloatArray,
    ps: FloatArray,
) -> None:
    """Smoother recursion from step ``hi`` down to step ``lo`` (both included). Row ``k`` of
    ``gains`` is C00, C01, C10, C11 of the interval k -> k + 1; of ``predicted`` the predicted
    x0, x1, x2, x3, P00, P01, P11 at k + 1; of ``filtered`` the filtered x0, x2, P00, P01,
    P11 at k. ``state`` holds the smoothed x0..x3, P00, P01, P11 of step ``hi + 1`` and is
    updated in place; step ``k`` writes row ``k`` of ``xs`` and ``ps``."""
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    sa, sb, sd = state[4], state[5], state[6]
    for k in range(hi, lo - 1, -1):
        c00k, c01k, c10k, c11k = gains[k, 0], gains[k, 1], gains[k, 2], gains[k, 3]
        p0, p1, p2, p3 = predicted[k, 0], predicted[k, 1], predicted[k, 2], predicted[k, 3]
        ka, kb, kd = predicted[k, 4], predicted[k, 5], predicted[k, 6]
        f0, f2 = filtered[k, 0], filtered[k, 1]
        ga, gb, gd = filtered[k, 2], filtered[k, 3], filtered[k, 4]
        de0, de1, dn0, dn1 = s0 - p0, s1 - p1, s2 - p2, s3 - p3
        # (p1, p3: the predicted velocity is the filtered one)
        s0, s1, s2, s3 = (
            f0 + c00k * de0 + c01k * de1,
            p1 + c10k * de0 + c11k * de1,
            f2 + c00k * dn0 + c01k * dn1,
            p3 + c10k * dn0 + c11k * dn1,
        )
        xs[k, 0], xs[k, 1], xs[k, 2], xs[k, 3] = s0, s1, s2, s3
        ea, eb, ed = sa - ka, sb - kb, sd - kd
        # C E Cᵀ for symmetric E
        t00, t01 = c00k * ea + c01k * eb, c00k * eb + c01k * ed
        t10, t11 = c10k * ea + c11k * eb, c10k * eb + c11k * ed
        sa, sb, sd = (
            ga + t00 * c00k + t01 * c01k,
            gb + t00 * c10k + t01 * c11k,
            gd + t10 * c10k + t11 * c11k,
        )
        ps[k, 0], ps[k, 1], ps[k, 2] = sa, sb, sd
    state[0], state[1], state[2], state[3] = s0, s1, s2, s3
    state[4], state[5], state[6] = sa, sb, sd
