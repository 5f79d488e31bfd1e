"""One line per published record, as the demo prints them (parsing is tolerant: a line says
when a record could not be read)."""

from __future__ import annotations

import json


def release_line(raw: bytes | None) -> tuple[str, bool]:
    """The line for a release record, and whether it could be read."""
    try:
        r = json.loads(raw or b"")
        return (
            f"release seq={int(r['seq'])} theta={float(r['theta']):.4f} "
            f"noisy_sum={float(r['noisy_sum']):.2f} priors_seq={int(r['priors_seq'])} "
            f"epsilon_left={float(r['epsilon_remaining']):.4f}"
        ), True
    except (ValueError, KeyError, TypeError):
        return "release: (unreadable record skipped)", False


def round_line(raw: bytes | None) -> tuple[str, bool]:
    """The line for a priors (learning round) record, and whether it could be read."""
    try:
        r = json.loads(raw or b"")
        law = ", ".join(f"{x:g}:{p:.3f}" for x, p in zip(r["support"], r["probs"], strict=True))
        return (f"learning round seq={int(r['seq'])} group={r['group']} "
                f"epsilon_learn={float(r['epsilon_learn']):g} status={r['status']} "
                f"radius={float(r['radius']):.3f} law={{{law}}}"), True
    except (ValueError, KeyError, TypeError):
        return "learning round: (unreadable record skipped)", False
