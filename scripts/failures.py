"""The failed and erroring tests of a pytest JUnit XML report, one short line each.

scripts/test.sh prints these last, so that the end of CI's output (often all that is kept of it)
names every failure even when a failure's own message is long (a worker's diagnostics dump).
Usage: python scripts/failures.py REPORT.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

WIDTH = 200


def failures(report: str) -> list[str]:
    lines = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            module = case.get("classname", "").replace(".", "/")
            name = "::".join(filter(None, (module, case.get("name"))))
            message = " ".join((found.get("message") or found.text or "").split())
            kind = "FAILED" if outcome == "failure" else "ERROR"
            lines.append(f"{kind} {name}: {message}"[:WIDTH])
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/failures.py REPORT.xml", file=sys.stderr)
        return 2
    try:
        found = failures(argv[1])
    except (OSError, ET.ParseError) as error:
        print(f"scripts/failures.py: {argv[1]}: {error}", file=sys.stderr)
        return 2
    if found:
        print(f"{len(found)} tests did not pass:")
        print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
