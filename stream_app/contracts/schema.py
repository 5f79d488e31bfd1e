"""``pufferfish schema --out DIR``: write the topic contracts (JSON Schemas + AsyncAPI).

Writes ``<topic>.schema.json`` for reports, membership, releases, priors and deadletter and
``asyncapi.json`` (AsyncAPI 2.6.0) into DIR. The output is deterministic (sorted keys, two-space
indent, ASCII, one trailing newline), so regenerating the committed copy (``deploy/schemas/``)
gives no diff. ``--check`` writes nothing: exit 0 if DIR holds exactly these bytes, else 1 with
the differing files on stderr. Bad input: one line ``pufferfish: error: <field>: <message>``,
exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pufferfish_core.errors import PufferfishInputError
from stream_app.contracts.asyncapi import asyncapi_document
from stream_app.contracts.catalog import CONTRACTS, topic_schema
from stream_app.settings import arguments

ASYNCAPI_FILE = "asyncapi.json"
EXIT_INPUT_ERROR = 2
EXIT_DIFFERS = 1


def dumps(document: Any) -> str:
    """The one serialisation of every contract file."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True,
                      allow_nan=False) + "\n"


def render() -> dict[str, str]:
    """{file name: content} of every contract file, in a stable order."""
    files = {c.file_name: dumps(topic_schema(c)) for c in CONTRACTS}
    files[ASYNCAPI_FILE] = dumps(asyncapi_document())
    return files


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def write(out: Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` into ``out`` (created if missing); PufferfishInputError("out", ...)."""
    if out.exists() and not out.is_dir():
        raise PufferfishInputError("out", f"{str(out)!r} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PufferfishInputError("out", f"cannot create {str(out)!r}: {_reason(exc)}") from None
    written = []
    for name, text in files.items():
        path = out / name
        try:
            path.write_bytes(text.encode("ascii"))
        except OSError as exc:
            raise PufferfishInputError("out", f"cannot write {str(path)!r}: {_reason(exc)}"
                                       ) from None
        written.append(path)
    return written


def differing(out: Path, files: dict[str, str]) -> list[str]:
    """Names of the files that are missing from ``out`` or hold other bytes."""
    if out.exists() and not out.is_dir():
        raise PufferfishInputError("out", f"{str(out)!r} exists and is not a directory")
    stale = []
    for name, text in files.items():
        try:
            same = (out / name).read_bytes() == text.encode("ascii")
        except FileNotFoundError:
            same = False
        except OSError as exc:
            raise PufferfishInputError("out", f"cannot read {str(out / name)!r}: "
                                       f"{_reason(exc)}") from None
        if not same:
            stale.append(name)
    return stale


def _run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    files = render()
    if args.check:
        stale = differing(out, files)
        if stale:
            print(f"pufferfish schema: {', '.join(stale)} in {str(out)!r} differ from the models;"
                  f" run: pufferfish schema --out {out}", file=sys.stderr)
            return EXIT_DIFFERS
        return 0
    for path in write(out, files):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments.CommandParser("pufferfish schema", "Write the topic contracts (JSON "
                                     "Schemas of the records, AsyncAPI 2.6.0 document) into DIR.")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory of the contract files (created if missing)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if DIR's files differ from the models")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        if not args.out:
            raise PufferfishInputError("out", "must name a directory")
        return _run(args)
    except PufferfishInputError as exc:
        print(f"pufferfish: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_INPUT_ERROR


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
