"""``pufferfish calibrate``: theta for a secret-pair spec (core/spec.py), with its audit and
its charge. Pure: no I/O.

theta is core.policy.calibrate's for the spec's pair and rule. The reported ``loss`` is the
exact two-sided audit of theta on the user's own pair, which bounds the loss for every
population of other users (docs/errata.md, "A user-local exact calibration"). ``charge`` is
what the stream charges per release under composition for this pair and theta
(core.budget.composition_charge: max(epsilon, plan spread / theta); docs/privacy.md,
"Composition"): epsilon for value pairs and the pointwise rules, more for the exact and relaxed
rules on distribution pairs. It is null when that charge is infinite (theta = 0 with a spread
> 0: the stream refuses every release of such a pair). This module loads the calibrators (and
scipy); parsing and auditing a spec do not.
"""

from __future__ import annotations

import math
from typing import Any

from pufferfish_core import validation
from pufferfish_core.auditor import audit
from pufferfish_core.budget import composition_charge
from pufferfish_core.kantorovich import plan_spread
from pufferfish_core.policy import calibrate
from pufferfish_core.spec import parse_spec


def calibrate_spec(spec: object, epsilon: float) -> dict[str, Any]:
    """theta for the spec at epsilon, with the exact audited loss of that theta (one release)
    and the per-release charge under composition (module docstring)."""
    eps = validation.epsilon(epsilon)
    parsed = parse_spec(spec)
    calibration = calibrate(
        parsed.kind, parsed.rule, parsed.first, parsed.second, eps, parsed.rest
    )
    validation.finite_theta(
        calibration.theta, f"{parsed.pair}/{parsed.rule} gives no finite theta"
    )
    result: dict[str, Any] = {
        "pair": parsed.pair,
        "rule": parsed.rule.value,
        "theorem": calibration.theorem,
        "epsilon": eps,
        "theta": calibration.theta,
    }
    own = audit(parsed.first, parsed.second, calibration.theta)
    result.update(loss=own.loss, forward=own.forward, reverse=own.reverse)
    charge = composition_charge(
        plan_spread(parsed.first, parsed.second), calibration.theta, eps
    )
    result["charge"] = charge if math.isfinite(charge) else None
    if parsed.rest is not None:
        priors = audit(
            parsed.first.convolve(parsed.rest), parsed.second.convolve(parsed.rest),
            calibration.theta,
        )
        result["loss_priors"] = priors.loss
    return result
