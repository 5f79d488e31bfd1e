"""What the shipped deployments give the worker, read from the files themselves.

No Docker engine or cluster runs here: the Dockerfile, docker-compose.yml and deploy/k8s are
parsed, and the worker's environment is rebuilt from them as the engine would build it (image
ENV, then the manifest's variables on top).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.deploy.support import (
    COMPOSE_FILE,
    DEPLOY,
    DOCKERFILE,
    K8S,
    ROOT,
    load_yaml,
    load_yaml_documents,
)

K8S_EXAMPLES = DEPLOY / "k8s-examples"
DOCKERIGNORE = DOCKERFILE.with_name(DOCKERFILE.name + ".dockerignore")
DEPLOY_README = DEPLOY / "README.md"
CONSOLE_SCRIPT = Path(sys.executable).parent / "pufferfish"
# the file extensions `kubectl apply -f DIR` reads
KUBECTL_EXTENSIONS = (".yaml", ".yml", ".json")


# --- Dockerfile -------------------------------------------------------------------------------

@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for key, rest in self.instructions if key == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def resolve(self, text: str) -> str:
        """``${NAME}`` / ``$NAME`` of a global ARG replaced by its default."""
        def sub(m: re.Match[str]) -> str:
            return self.global_args[m.group(1) or m.group(2)]
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, text)


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comment lines dropped (inside continuations too),
    backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if re.match(r"\s*#", line):
            continue
        if not pending and not line.strip():
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, rest = whole.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continuation"
    return out


def parse_dockerfile(path: Path = DOCKERFILE) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in dockerfile_instructions(path.read_text(encoding="utf-8")):
        if keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            key, _, value = rest.partition("=")
            global_args[key.strip()] = value.strip()
        else:
            stages[-1].instructions.append((keyword, rest))
    return Dockerfile(global_args, stages)


def env_instruction(rest: str) -> dict[str, str]:
    """``ENV K=V K2="V 2"`` (or the legacy ``ENV K V``) as a dict."""
    words = shlex.split(rest)
    if words and "=" not in words[0]:
        return {words[0]: rest.split(None, 1)[1] if len(words) > 1 else ""}
    return dict(w.split("=", 1) for w in words)


def image_env(dockerfile: Dockerfile | None = None) -> dict[str, str]:
    """The ENV of the final stage (what every container of the image starts with)."""
    env: dict[str, str] = {}
    for rest in (dockerfile or parse_dockerfile()).final.all("ENV"):
        env.update(env_instruction(rest))
    return env


# --- .dockerignore (moby patternmatcher semantics, enough for the patterns used) --------------

def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/" : zero or more directories
                out += "(?:.*/)?"
                i += 1
            else:
                out += ".*"
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile(out)


def dockerignore_rules(path: Path = DOCKERIGNORE) -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per pattern line, in order (``!`` patterns re-include)."""
    rules = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((not negate, _pattern_regex(pattern)))
    return rules


def in_build_context(relpath: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the file reaches the build context: the last pattern matching the path or one
    of its parent directories decides."""
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for exclude, regex in rules:
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = exclude
    return not excluded


def repository_files() -> list[str]:
    """The files a clean clone has (what a build context of the repository holds)."""
    result = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            timeout=60, check=True)
    return [p for p in result.stdout.decode().split("\0") if p]


# --- docker-compose.yml -----------------------------------------------------------------------

def compose_env(environment: dict[str, Any] | list[str]) -> dict[str, str]:
    if isinstance(environment, list):
        return dict(item.split("=", 1) for item in environment)
    return {k: "" if v is None else str(v) for k, v in environment.items()}


def compose_worker_env(compose: dict[str, Any] | None = None) -> dict[str, str]:
    """Everything a compose worker container gets: the image's ENV, then the service's."""
    worker = (compose or load_yaml(COMPOSE_FILE))["services"]["worker"]
    assert "env_file" not in worker, "read env_file here too"
    service = compose_env(worker["environment"])
    # no `${...}`: the values are exactly what the container gets, whatever the host has
    assert not any("$" in v for v in service.values()), service
    return {**image_env(), **service}


# --- deploy/k8s -------------------------------------------------------------------------------

def manifest_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in KUBECTL_EXTENSIONS)


def k8s_objects(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object for every manifest under ``directory``."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    files = manifest_files(directory)
    assert files, directory
    for path in files:
        docs = ([json.loads(path.read_text(encoding="utf-8"))] if path.suffix == ".json"
                else load_yaml_documents(path))
        for doc in docs:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} defined twice"
            found[key] = doc
    return found


def k8s_worker_container(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    (sts,) = [o for (kind, _), o in objects.items() if kind == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return dict(container)


def secret_data(secret: dict[str, Any]) -> dict[str, str]:
    import base64

    data = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
    return {**data, **secret.get("stringData", {})}


def k8s_worker_env() -> dict[str, str]:
    """Everything the k8s worker container gets: the image's ENV, then its envFrom sources in
    order (the ConfigMap of deploy/k8s, the example Secret of deploy/k8s-examples: the values an
    operator replaces there are placeholders), then its ``env``."""
    applied = k8s_objects(K8S)
    examples = {**applied, **(k8s_objects(K8S_EXAMPLES) if K8S_EXAMPLES.is_dir() else {})}
    container = k8s_worker_container(applied)
    env = image_env()
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(applied[("ConfigMap", source["configMapRef"]["name"])]["data"])
        else:
            env.update(secret_data(examples[("Secret", source["secretRef"]["name"])]))
    for item in container.get("env", []):
        assert "value" in item, f"read valueFrom here too: {item}"
        env[item["name"]] = item["value"]
    return env


# --- pufferfish plan --------------------------------------------------------------------------

def _plan(args: list[str], env: dict[str, str], cwd: Path) -> str:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("PUFFERFISH_") or k == "PUFFERFISH_CI_RUN"}
    pufferfish = {k: v for k, v in env.items() if k.startswith("PUFFERFISH_")}
    assert "PUFFERFISH_CONFIG_FILE" not in pufferfish
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "plan", *args], env={**clean, **pufferfish}, cwd=cwd,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def plan_json(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """``pufferfish plan --json`` with exactly these PUFFERFISH_* variables (none of the test
    process's, no config file; cwd: an empty directory)."""
    plan: dict[str, Any] = json.loads(_plan(["--json"], env, cwd))
    return plan


def plan_text(env: dict[str, str], cwd: Path) -> str:
    """``pufferfish plan`` (the text deploy/README.md shows), as ``plan_json``."""
    return _plan([], env, cwd)
