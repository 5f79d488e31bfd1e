"""Every input check of core/, so that every bad input fails the same way.

Each check takes raw input and returns it checked (and converted), or raises
``PufferfishInputError`` naming the field; ``within`` names a nested field's error inside its
parent, ``is_multiple`` is the grid test shared with core.noise. The other modules parse and
compute: the only other module that refuses input is core/vocabulary.py, for the names of pairs
and rules. Checks run where a value enters core (the public entry points), not again further
down: the calibrators, the exact search and the robust functions take checked values.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ValidationError

from pufferfish_core.errors import PufferfishInputError

PROB_SUM_TOLERANCE = 1e-9

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def epsilon(value: object, field: str = "epsilon") -> float:
    """A privacy budget: a finite number > 0."""
    eps = real(value, field)
    if eps <= 0.0:
        raise PufferfishInputError(field, f"must be > 0, got {eps!r}")
    return eps


def theta(value: object, field: str = "theta") -> float:
    """A Laplace scale: a finite number >= 0 (0 means no noise)."""
    return nonnegative(value, field)


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
    return nonnegative(value, field)


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


# -- quantities of the budget and the noise --------------------------------------------------


def nonnegative(value: object, field: str) -> float:
    """A finite number >= 0."""
    number = real(value, field)
    if number < 0:
        raise PufferfishInputError(field, f"must be >= 0, got {number!r}")
    return number


def positive(value: object, field: str) -> float:
    """A finite number > 0, refused as a negative number first (the charge's epsilon)."""
    number = nonnegative(value, field)
    if number == 0:
        raise PufferfishInputError(field, "must be > 0")
    return number


def number(value: object, field: str) -> float:
    """A real number that may be infinite (NaN and non-numbers are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise PufferfishInputError(field, f"must be a number, got {value!r}")
    return float(value)


def nonnegative_number(value: object, field: str) -> float:
    """A number >= 0 that may be infinite (a theta in a charge)."""
    return _signed(number(value, field), field, zero_allowed=True)


def positive_number(value: object, field: str) -> float:
    """A number > 0 that may be infinite (an infinite charge is refused by the accountant)."""
    return _signed(number(value, field), field, zero_allowed=False)


def _signed(out: float, field: str, zero_allowed: bool) -> float:
    if out < 0 or (out == 0 and not zero_allowed):
        raise PufferfishInputError(field, f"must be {'>=' if zero_allowed else '>'} 0, got {out}")
    return out


def fraction(text: object, field: str) -> Fraction:
    """An exact non-negative rational written 'num/den' (the accountant's exact sums)."""
    if not isinstance(text, str) or text.count("/") != 1:
        raise PufferfishInputError(field, f"must be a 'num/den' string, got {text!r}")
    numerator, denominator = text.split("/")
    if not (numerator.isdigit() and denominator.isdigit()) or int(denominator) == 0:
        raise PufferfishInputError(field, f"must be a 'num/den' string, got {text!r}")
    return Fraction(int(numerator), int(denominator))


def count(value: object, field: str) -> int:
    """An integer >= 0 (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PufferfishInputError(field, f"must be an integer >= 0, got {value!r}")
    return value


def at_least(value: object, minimum: int, field: str) -> int:
    """An integer >= ``minimum`` (bools are refused): a tree's ticks or arity."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PufferfishInputError(field, f"must be an integer >= {minimum}, got {value!r}")
    return value


def bins(value: object, field: str = "k") -> int:
    """A number of histogram bins: an integer >= 1 (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 1:
        raise PufferfishInputError(field, f"must be an int >= 1, got {value!r}")
    return int(value)


def integer(value: object, field: str) -> int:
    """An int (bools are refused); any size."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PufferfishInputError(field, f"must be an int, got {type(value).__name__}")
    return value


def index(value: object, size: int, field: str) -> int:
    """An index into a sequence of ``size`` items."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size:
        raise PufferfishInputError(field, f"must be a user index in [0, {size})")
    return value


MIN_GRID_LOG2 = -60
MAX_GRID_LOG2 = 60
MAX_SCALE_LOG2 = 256


def grid_log2(value: object) -> int:
    """The noise grid's exponent: an int in [MIN_GRID_LOG2, MAX_GRID_LOG2]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PufferfishInputError("grid_log2", f"must be an int, got {value!r}")
    if not MIN_GRID_LOG2 <= value <= MAX_GRID_LOG2:
        raise PufferfishInputError(
            "grid_log2", f"must be in [{MIN_GRID_LOG2}, {MAX_GRID_LOG2}], got {value}"
        )
    return value


def exact_real(value: object, field: str) -> float:
    """A real number that is exactly a float (it may be infinite or NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PufferfishInputError(field, f"must be a real number, got {type(value).__name__}")
    as_float = float(value)
    if math.isfinite(as_float) and as_float != value:
        raise PufferfishInputError(field, f"{value} is not exactly representable as a float")
    return as_float


def is_multiple(value: object, grid: Fraction) -> bool:
    """``value`` is a finite real number and an exact multiple of ``grid``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    as_float = float(value)
    return (
        math.isfinite(as_float)
        and as_float == value
        and (Fraction(as_float) / grid).denominator == 1
    )


def on_grid(value: float, grid_log2: int) -> float:
    """A value to release (already ``exact_real``): finite and a multiple of 2**grid_log2."""
    if not math.isfinite(value):
        raise PufferfishInputError("value", f"must be finite, got {value}")
    if not is_multiple(value, Fraction(2) ** grid_log2):
        raise PufferfishInputError("value", f"is not a multiple of the grid 2**{grid_log2}")
    return value


def noise_scale(theta: object, grid_log2: int) -> Fraction:
    """theta / 2**grid_log2 as an exact Fraction (0 for theta 0): theta exactly a float,
    finite, >= 0, and theta / g at most 2**MAX_SCALE_LOG2 (a huge scale would stall the
    sampler). ``grid_log2`` is validated by the caller."""
    th = exact_real(theta, "theta")
    if not math.isfinite(th) or th < 0:
        raise PufferfishInputError("theta", f"must be finite and >= 0, got {th}")
    scale = Fraction(th) / Fraction(2) ** grid_log2
    if scale > Fraction(2) ** MAX_SCALE_LOG2:
        raise PufferfishInputError(
            "theta", f"theta / 2**{grid_log2} exceeds 2**{MAX_SCALE_LOG2}; use a coarser grid"
        )
    return scale


def sampler_scale(value: object) -> Fraction:
    """The discrete Laplace sampler's scale: a positive Fraction."""
    if not isinstance(value, Fraction) or value <= 0:
        raise PufferfishInputError("scale", f"must be a positive Fraction, got {value!r}")
    return value


def exponent(value: Fraction) -> Fraction:
    """gamma of a Bernoulli(exp(-gamma)) draw: a rational >= 0."""
    if value < 0:
        raise PufferfishInputError("gamma", f"must be >= 0, got {value}")
    return value


def histogram_rows(counts: object, limit: int) -> tuple[IntArray, IntArray]:
    """(rows, row totals) of an (n, K) array of histograms, each with at least one report,
    every entry and every total below ``limit`` (so that products with the share units fit in
    int64)."""
    c = np.asarray(counts, dtype=np.int64)
    if c.ndim != 2:
        raise PufferfishInputError("counts", "must be an (n, K) array")
    if c.shape[0] == 0:
        return c, np.zeros(0, dtype=np.int64)
    if c.min() < 0 or c.max() >= limit:
        raise PufferfishInputError("counts", "must be non-negative and below SHARES_COUNT_LIMIT")
    totals = c.sum(axis=1, dtype=np.int64)  # no overflow: K * limit < 2**63
    if totals.min() <= 0 or totals.max() >= limit:
        raise PufferfishInputError(
            "counts", "every row needs a positive total below SHARES_COUNT_LIMIT"
        )
    return c, totals


# -- laws, systems and plans ------------------------------------------------------------------


def values_and_counts(values: object, counts: object) -> tuple[FloatArray, FloatArray]:
    """(values, counts) of a histogram: distinct finite values, counts >= 0 with a positive
    total, as many of each."""
    xs = finite_vector(values, "values")
    cs = counts_vector(counts)
    if xs.size != cs.size:
        raise PufferfishInputError("counts", f"has {cs.size} entries but values has {xs.size}")
    if np.unique(xs).size != xs.size:
        raise PufferfishInputError("values", "has duplicate points")
    return xs, cs


def bernoulli(support: Collection[float], field: str, purpose: str) -> None:
    """A law whose positive support is within {0, 1}, as the binary rules need."""
    if not set(support) <= {0.0, 1.0}:
        raise PufferfishInputError(field, f"must be Bernoulli (all mass on 0 and 1) {purpose}")


def point_mass(support: Sequence[float], field: str) -> float:
    """The value of a point mass, from its positive support (value pairs are point masses)."""
    if len(support) != 1:
        raise PufferfishInputError(field, "must be a point mass for a value pair")
    return float(support[0])


def non_empty(value: Sequence[Any], field: str) -> None:
    if not value:
        raise PufferfishInputError(field, "must not be empty")


def thetas(values: object) -> list[float]:
    """Noise scales of releases of one value: a non-empty list of thetas, at most
    MAX_RELEASES of them."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
        raise PufferfishInputError("thetas", "must be a non-empty list of noise scales")
    releases(len(values), "thetas")
    return [theta(th, "thetas") for th in values]


def group_radii(laws: Collection[str], radii: Mapping[str, object] | None) -> dict[str, float]:
    """Checked radius of every group with a law ({} without radii): at least one group, and no
    radius for a group without a law."""
    if not laws:
        raise PufferfishInputError("groups", "at least one group with a law is needed")
    unknown = sorted(set(radii or {}) - set(laws))
    if unknown:
        raise PufferfishInputError("radii", f"names groups without a law: {unknown}")
    if not radii:
        return {}
    return {g: radius(radii.get(g, 0.0), f"radii.{g}") for g in laws}


# -- documents: the CLI's specs and the accountant's record -----------------------------------


def mapping(value: object, field: str, message: str) -> Mapping[str, Any]:
    """A JSON object."""
    if not isinstance(value, Mapping):
        raise PufferfishInputError(field, message)
    return value


def present(data: Mapping[str, Any], keys: Sequence[str], message: str, prefix: str = "") -> None:
    """Every key is in ``data``; else one error naming all the missing ones (each after
    ``prefix``, in ``keys`` order), so a user fixes them in one go. ``message`` ("is …") says
    "are …" for several."""
    _none_missing([f"{prefix}{key}" for key in keys if key not in data], message)


def present_in_each(objects: Mapping[str, Any], keys: Sequence[str], message: str) -> None:
    """``present`` for several objects at once (``objects``: field name -> value; a value that
    is not an object is left to its own check): one error names every missing ``field.key``."""
    _none_missing([f"{name}.{key}" for name, data in objects.items()
                   if isinstance(data, Mapping) for key in keys if key not in data], message)


def _none_missing(missing: Sequence[str], message: str) -> None:
    if len(missing) > 1 and message.startswith("is "):
        message = "are " + message.removeprefix("is ")
    if missing:
        raise PufferfishInputError(", ".join(missing), message)


def known(
    data: Mapping[str, Any], allowed: Collection[str], message: str, prefix: str = "",
    why: Mapping[str, str] | None = None,
) -> None:
    """No key outside ``allowed`` (the first in sorted order is named; ``why`` gives some keys
    their own message)."""
    extra = sorted(set(data) - set(allowed))
    if extra:
        raise PufferfishInputError(f"{prefix}{extra[0]}", (why or {}).get(extra[0], message))


def choice(value: object, field: str, allowed: Sequence[str]) -> str:
    """One of the ``allowed`` strings."""
    if not isinstance(value, str) or value not in allowed:
        raise PufferfishInputError(field, f"must be one of {', '.join(allowed)}; got {value!r}")
    return value


def distinct(value: float, other: float, field: str, message: str) -> None:
    """The two ends of a value pair differ."""
    if value == other:
        raise PufferfishInputError(field, message)


def within(field: str, exc: PufferfishInputError) -> PufferfishInputError:
    """The same error, its field named inside ``field`` (``P.probs`` for ``probs`` of P)."""
    return PufferfishInputError(f"{field}.{exc.field}", exc.message)


def finite_theta(value: float, message: str) -> float:
    """A calibrated theta that is finite (an infinite one is no answer to the spec)."""
    if not math.isfinite(value):
        raise PufferfishInputError("theta", message)
    return value


def group_theta(value: float, group: str) -> float:
    """A per-group sum's theta (core/group_plan.py): positive, else that group's exact sum
    would be published."""
    if not value > 0:
        raise PufferfishInputError(
            "release_by_group", f"group {group!r}: no configured pair needs noise on its sum "
            "(theta 0): its exact sum would be published; add a pair that protects it")
    return value


def count_grid(grid_log2: int) -> int:
    """The grid of a per-group release (core/group_plan.py): its noisy counts are integers
    plus noise on the 2**grid_log2 grid, so 1 must be on it (grid_log2 <= 0)."""
    if grid_log2 > 0:
        raise PufferfishInputError(
            "release_by_group", f"the counts are integers on the noise grid 2**{grid_log2}, "
            "which does not hold 1: use grid_log2 <= 0")
    return grid_log2


BUDGET_KEYS = ("total", "total_exact", "spent", "spent_exact", "releases", "charges")


def budget_record(
    data: object, exact: Callable[[float], Fraction]
) -> tuple[float, list[float], Fraction]:
    """(total, charges, exact spent) of an ``Accountant.to_dict`` record, every field checked
    against the others: ``exact`` is the accountant's float -> Fraction bookkeeping."""
    record = mapping(data, "budget", "must be a JSON object")
    present(record, BUDGET_KEYS, "is missing")
    total = nonnegative(record["total"], "total")
    if fraction(record["total_exact"], "total_exact") != exact(total):
        raise PufferfishInputError("total_exact", "does not match total")
    charges = record["charges"]
    if not isinstance(charges, list):
        raise PufferfishInputError("charges", "must be a list")
    releases = record["releases"]
    if isinstance(releases, bool) or not isinstance(releases, int) or releases != len(charges):
        raise PufferfishInputError("releases", "must equal the number of charges")
    spent = Fraction(0)
    for charge in charges:
        value = nonnegative(charge, "charges")
        if value == 0:
            raise PufferfishInputError("charges", "every charge must be > 0")
        spent += exact(value)
    if fraction(record["spent_exact"], "spent_exact") != spent:
        raise PufferfishInputError("spent_exact", "does not equal the sum of the charges")
    if nonnegative(record["spent"], "spent") != float(spent):
        raise PufferfishInputError("spent", "does not match spent_exact")
    if spent > exact(total):
        raise PufferfishInputError("spent", "exceeds total")
    return total, [float(c) for c in charges], spent
