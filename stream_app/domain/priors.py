"""The public priors: configured groups and their starting laws, from the settings alone.

These are the laws of learning round 0 (``priors_seq`` 0): the declared law of each group in
``priors_file``, or the uniform law on the domain for a learned group without one. Later
rounds come only from the ``priors`` topic (DP estimates). Nothing here reads user data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pufferfish_core import validation
from pufferfish_core.auditor import WHOLE
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.group_plan import GroupReleasePlan, group_release_plan
from pufferfish_core.learning import HistogramLearner, uniform
from pufferfish_core.plan import ReleasePlan, release_plan
from pufferfish_core.vocabulary import PairKind
from stream_app.settings import Settings

FALLBACK_GROUP = "default"


def load_priors(path: Path) -> dict[str, Distribution]:
    """``{group: {support, probs}}`` from a JSON file; PufferfishInputError naming the field."""
    return load_priors_and_radii(path)[0]


def load_priors_and_radii(path: Path) -> tuple[dict[str, Distribution], dict[str, float]]:
    """The laws of a priors file and their optional L1 ``radius`` (default 0: exact laws;
    clamped to [0, 2], 2 being the whole simplex)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"), object_pairs_hook=_unique_keys)
    except OSError as exc:
        raise PufferfishInputError("priors_file", f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PufferfishInputError("priors_file", f"is not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise PufferfishInputError("priors_file", "is not UTF-8 text") from None
    except RecursionError:
        raise PufferfishInputError("priors_file", "is nested too deeply") from None
    except ValueError as exc:  # a duplicate key, or an integer beyond Python's digit limit
        raise PufferfishInputError("priors_file", f"is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not doc:
        raise PufferfishInputError(
            "priors_file", "must be a non-empty object {group: {support, probs}}"
        )
    out: dict[str, Distribution] = {}
    radii: dict[str, float] = {}
    for group, spec in doc.items():
        if not isinstance(spec, dict):
            raise PufferfishInputError(f"priors_file.{group}", "must be {support, probs}")
        law = {k: v for k, v in spec.items() if k != "radius"}
        try:
            out[str(group)] = Distribution.model_validate(law)
            # >= 2 is the whole simplex: clamped here, so no radius above 2 is ever kept or
            # republished (a PriorsRecord carries radius <= 2)
            radii[str(group)] = min(validation.radius(spec.get("radius", 0.0), "radius"), WHOLE)
        except PufferfishInputError as exc:
            raise PufferfishInputError(f"priors_file.{group}.{exc.field}", exc.message) from None
    return out, radii


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


@dataclass(frozen=True)
class PublicPriors:
    """Configured groups, the group of a join without one, and the round-0 laws and radii.

    Radii: a declared law is exact unless priors_file gives a ``radius``; a learned group without
    a declared law starts uniform with radius 2 (it estimates nothing: theta is the worst case
    over the domain until the first learning round).
    """

    laws: dict[str, Distribution]
    default_group: str | None
    radii: dict[str, float] = field(default_factory=dict)

    @property
    def groups(self) -> frozenset[str]:
        return frozenset(self.laws)


def public_priors(settings: Settings) -> PublicPriors:
    """Round-0 laws for every configured group; PufferfishInputError on a bad configuration."""
    s = settings
    declared, declared_radii = (
        load_priors_and_radii(s.priors_file) if s.priors_file is not None else ({}, {})
    )
    domain = set(s.domain)
    for group, law in declared.items():
        outside = [x for x in law.support if x not in domain]
        if outside:
            raise PufferfishInputError(
                f"priors_file.{group}.support", f"{outside[0]:g} is not in the domain"
            )
    groups = set(declared) | set(s.groups) | ({s.default_group} if s.default_group else set())
    if not groups:
        groups = {FALLBACK_GROUP}
    default = s.default_group or (next(iter(groups)) if len(groups) == 1 else None)
    laws: dict[str, Distribution] = {}
    radii: dict[str, float] = {}
    for group in sorted(groups):
        if group in declared:
            laws[group], radii[group] = declared[group], declared_radii[group]
        elif s.prior_source == "declared":
            field = "default_group" if group == s.default_group else "groups"
            raise PufferfishInputError(field, f"group {group!r} has no law in priors_file")
        else:
            laws[group], radii[group] = uniform(s.domain), WHOLE
    if PairKind.DISTRIBUTION_CHANGE in s.pairs and len(laws) < 2:
        raise PufferfishInputError(
            "pairs", "distribution_change needs at least two configured groups (priors_file, "
            "groups)"
        )
    return PublicPriors(laws=laws, default_group=default, radii=radii)


def plan_for(
    settings: Settings, laws: Mapping[str, Distribution], radii: Mapping[str, float]
) -> ReleasePlan:
    """The release plan for these public laws and their radii (the one code path of the worker
    and `plan`); theta covers every law within each group's radius (core/robust.py)."""
    s = settings
    return release_plan(laws, s.pairs, s.rule, s.epsilon, s.grid_log2, radii, s.domain)


def group_plan_for(
    settings: Settings, laws: Mapping[str, Distribution], radii: Mapping[str, float]
) -> GroupReleasePlan | None:
    """The per-group release plan (core/group_plan.py) when ``release_by_group`` is on."""
    s = settings
    if not s.release_by_group:
        return None
    return group_release_plan(laws, s.pairs, s.rule, s.epsilon, s.grid_log2, radii, s.domain)


def learner_for(settings: Settings) -> HistogramLearner | None:
    """The learning mechanism, or None with declared priors (no learning rounds)."""
    s = settings
    if s.prior_source != "learned":
        return None
    return HistogramLearner(
        domain=s.domain, epsilon_learn=s.epsilon_learn, floor=s.prior_floor,
        min_mass=s.learn_min_mass,
    )


def checked_start(settings: Settings) -> tuple[PublicPriors, ReleasePlan]:
    """Start-up check shared by `run` and `plan`: a configuration that never needs noise is an
    error (the worker would otherwise never release, or release exact sums)."""
    priors = public_priors(settings)
    plan = plan_for(settings, priors.laws, priors.radii)
    group_plan_for(settings, priors.laws, priors.radii)  # refuses a group that needs no noise
    if plan.theta <= 0:
        raise PufferfishInputError(
            "pairs", "no configured pair needs noise for any group (theta would be 0): "
            "nothing could ever be released; check pairs, domain and priors_file"
        )
    return priors, plan
