"""All input checks of core/ live here, so every bad input fails the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ValidationError

from core.errors import PufferfishInputError

PROB_SUM_TOLERANCE = 1e-9

FloatArray = npt.NDArray[np.float64]


def epsilon(value: float, field: str = "epsilon") -> float:
    """A privacy budget: a finite number > 0."""
    eps = real(value, field)
    if eps <= 0.0:
        raise PufferfishInputError(field, f"must be > 0, got {eps!r}")
    return eps


def theta(value: float, field: str = "theta") -> float:
    """A Laplace scale: a finite number >= 0 (0 means no noise)."""
    th = real(value, field)
    if th < 0.0:
        raise PufferfishInputError(field, f"must be >= 0, got {th!r}")
    return th


MAX_RELEASES = 1_000_000


def releases(value: object, field: str = "releases") -> int:
    """A number of releases: an integer in [1, MAX_RELEASES] (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise PufferfishInputError(field, f"must be an integer, got {type(value).__name__}")
    out = int(value)
    if not 1 <= out <= MAX_RELEASES:
        raise PufferfishInputError(field, f"must be in [1, {MAX_RELEASES}], got {out}")
    return out


def real(value: object, field: str) -> float:
    """A finite real number (bools are refused: they are almost always a mistake)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise PufferfishInputError(field, f"must be a finite number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise PufferfishInputError(field, f"must be finite, got {out!r}")
    return out


def probability(value: object, field: str) -> float:
    p = real(value, field)
    if not 0.0 <= p <= 1.0:
        raise PufferfishInputError(field, f"must be in [0, 1], got {p!r}")
    return p


def finite_vector(values: object, field: str) -> FloatArray:
    """A non-empty 1-D vector of finite reals."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise PufferfishInputError(field, "must be a list of numbers")
    if any(isinstance(v, bool) for v in values):
        raise PufferfishInputError(field, "must contain numbers, not booleans")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise PufferfishInputError(field, "must be a list of numbers") from exc
    if arr.ndim != 1:
        raise PufferfishInputError(field, "must be a flat list of numbers")
    if arr.size == 0:
        raise PufferfishInputError(field, "must not be empty")
    if not np.all(np.isfinite(arr)):
        raise PufferfishInputError(field, "must contain only finite numbers (no NaN or inf)")
    return arr


def support_and_probs(support: object, probs: object) -> tuple[FloatArray, FloatArray]:
    """Validated (sorted support, renormalised probs) of a finite distribution."""
    xs = finite_vector(support, "support")
    ps = finite_vector(probs, "probs")
    if xs.size != ps.size:
        raise PufferfishInputError(
            "probs", f"has {ps.size} entries but support has {xs.size}"
        )
    if np.any(ps < 0.0):
        raise PufferfishInputError("probs", "must be >= 0")
    total = math.fsum(ps.tolist())
    if abs(total - 1.0) > PROB_SUM_TOLERANCE:
        raise PufferfishInputError("probs", f"must sum to 1 (tolerance 1e-9), sum is {total!r}")
    order = np.argsort(xs, kind="stable")
    xs, ps = xs[order], ps[order]
    if np.any(np.diff(xs) == 0.0):
        raise PufferfishInputError("support", "has duplicate points")
    return xs, ps / total


def counts_vector(counts: object) -> FloatArray:
    cs = finite_vector(counts, "counts")
    if np.any(cs < 0.0):
        raise PufferfishInputError("counts", "must be >= 0")
    if not cs.sum() > 0.0:
        raise PufferfishInputError("counts", "must have a positive total")
    return cs


def integer_lattice(xs: FloatArray, field: str) -> None:
    """A rule stated on the integers refuses any other support."""
    if np.any(xs != np.round(xs)):
        raise PufferfishInputError(field, "must be supported on integers for this rule")


def from_pydantic(exc: ValidationError, whole: str) -> PufferfishInputError:
    """The PufferfishInputError inside a pydantic error, or one naming pydantic's field
    (``whole`` when the error is about the model as a whole)."""
    for err in exc.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, PufferfishInputError):
            return inner
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or whole
    return PufferfishInputError(field, first["msg"])


def radius(value: object, field: str = "radius") -> float:
    """An L1 radius around a law: a finite number >= 0 (>= 2 is the whole simplex)."""
    r = real(value, field)
    if r < 0.0:
        raise PufferfishInputError(field, f"must be >= 0, got {r!r}")
    return r


def confidence_beta(value: object, field: str = "prior_confidence_beta") -> float:
    """A failure probability strictly between 0 and 1."""
    b = real(value, field)
    if not 0.0 < b < 1.0:
        raise PufferfishInputError(field, f"must be in (0, 1), got {b!r}")
    return b


class InputModel(BaseModel):
    """A pydantic model whose bad input raises PufferfishInputError, built or validated.

    ``whole`` names the model in an error about it as a whole (no single field)."""

    whole: ClassVar[str] = "input"

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise from_pydantic(exc, self.whole) from None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """As pydantic's, but bad input raises PufferfishInputError."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise from_pydantic(exc, cls.whole) from None

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:
        """As pydantic's, but bad input raises PufferfishInputError."""
        try:
            return super().model_validate_json(json_data, **kwargs)
        except ValidationError as exc:
            raise from_pydantic(exc, cls.whole) from None
