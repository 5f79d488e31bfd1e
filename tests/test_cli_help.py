"""``pufferfish COMMAND --help`` as a user reads it (the installed command): a description for
every command, every default shown, one metavar per concept, the spec format of ``calibrate``
and ``audit`` with an example that works, and a spec's missing fields named all at once."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from pufferfish_core.vocabulary import PairKind, Rule
from tests.installed_cli import CONSOLE_SCRIPT, one_line_error, pufferfish

# a module-scoped fixture: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_cli_help")

COMMANDS = ("calibrate", "audit", "run", "plan", "demo", "reproduce", "schema", "send", "tail")
# the metavar of each concept, wherever a command takes it
METAVARS = {"--config": "FILE", "--broker": "URL", "--timeout": "S", "--spec": "FILE|-"}
OPTION = re.compile(r"^  (-\w, )?(?P<flag>--[\w-]+)(?: (?P<metavar>\S+))?", re.MULTILINE)


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    out = {}
    for name in COMMANDS:
        done = pufferfish([name, "--help"], timeout=120)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        out[name] = done.stdout
    return out


def _description(text: str) -> str:
    """The paragraph(s) between the usage and the first argument section."""
    after_usage = text.split("\n\n", 1)[1]
    return re.split(r"^(options|positional arguments):$", after_usage, flags=re.MULTILINE)[0]


def _options(text: str) -> dict[str, tuple[str | None, str]]:
    """flag -> (metavar, its help text) from the options section."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    found = list(OPTION.finditer(section))
    out = {}
    for match, following in zip(found, [*found[1:], None], strict=True):
        end = following.start() if following else len(section)
        out[match["flag"]] = (match["metavar"], " ".join(section[match.end():end].split()))
    return out


def _optional_in_usage(text: str) -> set[str]:
    usage = text.split("\n\n", 1)[0]
    return set(re.findall(r"\[(--[\w-]+) [^\]]+\]", usage))


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_describes_itself_in_plain_text(name: str, helps: dict[str, str]) -> None:
    description = _description(helps[name])
    assert len(description.split()) >= 8, helps[name]
    assert "``" not in helps[name] and "`pufferfish" not in description


@pytest.mark.parametrize("name", COMMANDS)
def test_every_optional_value_says_its_default(name: str, helps: dict[str, str]) -> None:
    options = _options(helps[name])
    optional = _optional_in_usage(helps[name])
    silent = [flag for flag in optional if "default" not in options[flag][1]]
    assert silent == [], helps[name]


def test_one_metavar_per_concept(helps: dict[str, str]) -> None:
    seen: dict[str, set[str]] = {}
    for text in helps.values():
        for flag, (metavar, _) in _options(text).items():
            if metavar is not None:
                seen.setdefault(flag, set()).add(metavar)
    assert {flag: seen[flag] for flag in METAVARS} == {f: {m} for f, m in METAVARS.items()}
    assert "FILE|-" in helps["send"].split("\n\n", 1)[0]  # its input: a file or stdin


def test_calibrate_epsilon_is_not_called_a_budget(helps: dict[str, str]) -> None:
    """budget is budget_total everywhere else; calibrate's epsilon is the pair's loss bound."""
    _, text = _options(helps["calibrate"])["--epsilon"]
    assert "budget" not in text and "loss" in text


@pytest.mark.parametrize("name", ["calibrate", "audit"])
def test_the_spec_format_and_a_working_example_are_in_the_help(
        name: str, helps: dict[str, str]) -> None:
    text = helps[name]
    for word in [*(k.value for k in PairKind), "priors", *(r.value for r in Rule),
                 '"support"', '"probs"', '"a"', '"b"', '"P"', '"Q"', '"rest"']:
        assert word in text, word
    example = re.search(r"^  (echo '(?P<spec>[^']+)' \| pufferfish (?P<args>[^\n]+))\n"
                        r"  (?P<shown>\{[^\n]+\})$", text, re.MULTILINE)
    assert example is not None, text
    done = subprocess.run([str(CONSOLE_SCRIPT), *example["args"].split()], input=example["spec"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    shown = dict(re.findall(r'"(\w+)": ([\d.]+)', example["shown"]))
    assert shown and {k: float(v) for k, v in shown.items()} == {k: got[k] for k in shown}


@pytest.mark.parametrize("spec, field, message", [
    ({"pair": "value_change"}, "a, b", "are required for value_change/exact"),
    ({"pair": "distribution_change", "rule": "relaxed"}, "P, Q, rest",
     "are required for distribution_change/relaxed"),
    ({"pair": "distribution_change", "P": {}, "Q": {"probs": [1]}}, "P.support, P.probs, "
     "Q.support", "are missing"),
], ids=["values", "laws", "law-fields"])
def test_every_missing_spec_field_is_named_at_once(
        spec: dict[str, object], field: str, message: str) -> None:
    error = one_line_error(pufferfish(["calibrate", "--epsilon", "1", "--spec", "-"],
                                      stdin=json.dumps(spec), timeout=120))
    assert (error["field"], error["message"]) == (field, message)
