"""What every ``pufferfish`` command's arguments share: one parser class (a usage error is ONE
PufferfishInputError, so one line and exit 2; help shows every default), and the flags that
name settings, with one metavar per concept (FILE, URL, S for seconds).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING, NoReturn

from pufferfish_core.errors import PufferfishInputError
from stream_app.settings.model import Settings

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

CONFIG_HELP = ("JSON settings file; PUFFERFISH_* variables override its values (default: "
               "PUFFERFISH_CONFIG_FILE, if set)")
BROKER_HELP = ("broker URL kafka://host:port[,host:port] (default: PUFFERFISH_BROKER, else "
               f"{Settings.model_fields['broker'].default})")


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions and epilogs in paragraphs (blank-line separated) filled to the terminal,
    an indented paragraph (an example) as written; an option with a default that its help does
    not state gets ``(default: …)``."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            if paragraph.startswith(" "):
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                paragraphs.append(textwrap.fill(" ".join(paragraph.split()), width,
                                                initial_indent=indent, subsequent_indent=indent))
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        takes_default = action.option_strings or action.nargs in (argparse.OPTIONAL,
                                                                  argparse.ZERO_OR_MORE)
        unstated = action.default is None or action.default is False  # `is`: 0 is a default
        if "default" in text or not takes_default or unstated or \
                action.default == argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """The parser of a ``pufferfish`` command: one-line usage errors, defaults in the help, and
    a help text that a closed stdout does not swallow (the command then ends as every command
    does on a closed pipe: stream_app.cli)."""

    def __init__(self, prog: str | None = None, description: str | None = None,
                 **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(prog=prog, description=description, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        raise PufferfishInputError("arguments", message)

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        (file or sys.stdout).write(self.format_help())


def add_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)


def add_broker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", metavar="URL", help=BROKER_HELP)


def add_timeout(parser: argparse.ArgumentParser, default: float, what: str) -> None:
    parser.add_argument("--timeout", type=positive_seconds, default=default, metavar="S",
                        help=f"seconds to wait for the broker {what}")


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 (argparse names the flag in its one-line error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value
