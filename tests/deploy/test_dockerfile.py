"""deploy/Dockerfile and its .dockerignore, checked statically (no Docker engine runs here).

Two stages: `build` makes the project's wheel from the build context; the final stage copies
only that wheel, installs it with the rocksdb extra only, runs as a numeric non-root user and has a
HEALTHCHECK on /metrics. Every base image is pinned by digest. tests/ and docs/ never reach the
build context.
"""

from __future__ import annotations

import http.server
import json
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import (
    Dockerfile,
    Stage,
    dockerignore_rules,
    image_env,
    in_build_context,
    k8s_objects,
    k8s_worker_container,
    parse_dockerfile,
    repository_files,
)
from tests.deploy.support import COMPOSE_FILE, K8S, ROOT, load_yaml

DIGEST = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")


@pytest.fixture
def dockerfile() -> Dockerfile:
    return parse_dockerfile()


def _copy_args(rest: str) -> tuple[dict[str, str], list[str]]:
    """(--flags, [sources..., dest]) of a COPY instruction."""
    words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
    return flags, [w for w in words if not w.startswith("--")]


def _wheel_dir(build: Stage) -> str:
    (run,) = [r for r in build.all("RUN") if "wheel" in r]
    match = re.search(r"pip wheel .*--wheel-dir[= ](\S+)", run)
    assert match, run
    assert "--no-deps" in run  # the wheel of the project only: dependencies come from PyPI
    return match.group(1).rstrip("/")


def test_two_stages_a_build_and_the_final_one(dockerfile: Dockerfile) -> None:
    build, final = dockerfile.stages  # exactly two
    assert build.name == "build"
    assert final.base == build.base  # the same pinned base for both
    # the final stage starts from the base image, not from the build stage
    assert final.base not in {s.name for s in dockerfile.stages}


def test_base_images_are_pinned_by_digest(dockerfile: Dockerfile) -> None:
    for stage in dockerfile.stages:
        image = dockerfile.resolve(stage.base)
        assert DIGEST.fullmatch(image), f"FROM {stage.base} -> {image}: not pinned by digest"
        assert image.startswith("python:3.11-slim@sha256:"), image
    # the pattern refuses a tag alone
    assert not DIGEST.fullmatch("python:3.11-slim")
    assert not DIGEST.fullmatch("python:3.11-slim@sha256:abc123")


def test_the_final_stage_copies_only_the_wheel(dockerfile: Dockerfile) -> None:
    build, final = dockerfile.stages
    assert not final.all("ADD")
    copies = [_copy_args(rest) for rest in final.all("COPY")]
    assert len(copies) == 1, final.all("COPY")
    ((flags, paths),) = copies
    assert flags == {"from": "build"}
    *sources, dest = paths
    assert [s.rstrip("/") for s in sources] == [_wheel_dir(build)]
    # ... and installs just that wheel (with the rocksdb extra: the next test)
    installs = [r for r in final.all("RUN") if "pip install" in r]
    assert len(installs) == 1
    assert dest.rstrip("/") + "/*.whl" in installs[0]
    # the build stage builds from the context the .dockerignore filters
    assert any(_copy_args(r)[1][0] == "." for r in build.all("COPY"))


def _pip_install_argv(dockerfile: Dockerfile, tmp_path: Path) -> list[list[str]]:
    """The final stage's install command run by /bin/sh, with the wheel directory holding one
    wheel (tmp_path) and a stand-in ``pip`` on PATH that records its arguments."""
    _, final = dockerfile.stages
    (_, paths), = [_copy_args(rest) for rest in final.all("COPY")]
    wheels = paths[-1].rstrip("/")
    (run,) = [r for r in final.all("RUN") if "pip install" in r]
    steps = run.split("&&")
    install = " && ".join(steps[:next(i for i, c in enumerate(steps) if "pip install" in c) + 1])
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "pufferfish_stream-0.1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "bin").mkdir()
    pip = tmp_path / "bin" / "pip"
    record = f'open({str(tmp_path / "argv")!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")'
    pip.write_text(f"#!{sys.executable}\nimport json, sys\n{record}\n")
    pip.chmod(0o755)
    subprocess.run(["/bin/sh", "-c", install.replace(wheels, str(tmp_path / "wheels"))],
                   env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}, check=True, timeout=30)
    return [json.loads(line) for line in (tmp_path / "argv").read_text().splitlines()]


def test_the_image_installs_the_rocksdb_extra(dockerfile: Dockerfile, tmp_path: Path) -> None:
    """PUFFERFISH_STORE=rocksdb:// works in the shipped image: pip gets the wheel with the
    rocksdb extra (the extra that requires rocksdict), and no other extra."""
    argv = _pip_install_argv(dockerfile, tmp_path)
    wheel = tmp_path / "wheels" / "pufferfish_stream-0.1.0-py3-none-any.whl"
    assert argv == [["install", f"{wheel}[rocksdb]"]], argv
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]
    assert [r.split(">")[0].split("=")[0] for r in extras["rocksdb"]] == ["rocksdict"]


def test_the_install_check_sees_a_glob_left_in_the_extra(dockerfile: Dockerfile,
                                                         tmp_path: Path) -> None:
    """`pip install /tmp/wheels/*.whl[rocksdb]` would hand pip the unexpanded pattern (a glob
    with a character class): the check above must not accept it."""
    build, final = dockerfile.stages
    (_, paths), = [_copy_args(rest) for rest in final.all("COPY")]
    wheels = paths[-1].rstrip("/")
    instructions = [(k, f"pip install {wheels}/*.whl[rocksdb] && rm -rf {wheels}"
                     if k == "RUN" and "pip install" in rest else rest)
                    for k, rest in final.instructions]
    bad = Dockerfile(dockerfile.global_args, [build, Stage(final.base, final.name, instructions)])
    assert _pip_install_argv(bad, tmp_path) == [
        ["install", f"{tmp_path / 'wheels'}/*.whl[rocksdb]"]]


def test_runs_as_a_numeric_non_root_user(dockerfile: Dockerfile) -> None:
    build, final = dockerfile.stages
    (user,) = final.all("USER")
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user}: not numeric"
    uid, _, gid = user.partition(":")
    assert int(uid) != 0 and (not gid or int(gid) != 0)
    # USER comes after every RUN of the final stage (they need root), before the entrypoint
    keys = [k for k, _ in final.instructions]
    assert keys.index("USER") > max(i for i, k in enumerate(keys) if k == "RUN")
    # the user exists in the image with that uid, and k8s runs the pod as it
    assert re.search(rf"useradd .*--uid {uid}\b", " ".join(final.all("RUN")))
    pod = k8s_worker_pod()
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["fsGroup"] == int(gid or uid)


def k8s_worker_pod() -> dict[str, Any]:
    (sts,) = [o for (kind, _), o in k8s_objects(K8S).items() if kind == "StatefulSet"]
    pod: dict[str, Any] = sts["spec"]["template"]["spec"]
    return pod


def test_entrypoint_and_cmd_only_in_the_final_stage(dockerfile: Dockerfile) -> None:
    build, final = dockerfile.stages
    for keyword in ("ENTRYPOINT", "CMD", "USER", "HEALTHCHECK", "EXPOSE"):
        assert not build.all(keyword), keyword
    assert json.loads(final.all("ENTRYPOINT")[0]) == ["pufferfish"]


def _healthcheck(final: Stage) -> tuple[dict[str, str], list[str]]:
    (rest,) = final.all("HEALTHCHECK")
    options, _, command = rest.partition("CMD")
    flags = dict(w[2:].split("=", 1) for w in options.split())
    return flags, json.loads(command.strip())


def test_healthcheck_asks_the_metrics_endpoint_with_python(dockerfile: Dockerfile) -> None:
    flags, command = _healthcheck(dockerfile.final)
    assert set(flags) >= {"interval", "timeout", "start-period", "retries"}
    assert command[:2] == ["python", "-c"], "the slim image has no curl"
    assert "/metrics" in command[2] and "PUFFERFISH_METRICS_PORT" in command[2]


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/metrics" else 404)
        self.end_headers()
        self.wfile.write(b"# metrics\n")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_the_healthcheck_command_passes_and_fails(
    dockerfile: Dockerfile, metrics_server: int, closed_port: int
) -> None:
    _, command = _healthcheck(dockerfile.final)
    argv = [sys.executable, *command[1:]]

    def run(port: int) -> int:
        return subprocess.run(argv, env={"PUFFERFISH_METRICS_PORT": str(port)},
                              capture_output=True, timeout=30).returncode

    assert run(metrics_server) == 0
    assert run(closed_port) != 0  # nothing listens: unhealthy


def test_the_image_env_sets_the_data_dir_and_metrics(dockerfile: Dockerfile) -> None:
    env = image_env(dockerfile)
    assert env["PUFFERFISH_DATA_DIR"] == "/var/lib/pufferfish"
    assert env["PUFFERFISH_METRICS_HOST"] == "0.0.0.0"
    (workdir,) = dockerfile.final.all("WORKDIR")
    assert workdir == env["PUFFERFISH_DATA_DIR"]  # the user's home, created by useradd


# --- the build context --------------------------------------------------------------------------

def _context() -> list[str]:
    rules = dockerignore_rules()
    return [p for p in repository_files() if in_build_context(p, rules)]


def test_tests_and_docs_never_reach_the_build_context() -> None:
    files = repository_files()
    assert any(p.startswith("tests/") for p in files) and any(p.startswith("docs/") for p in files)
    context = _context()
    for top in ("tests/", "docs/", ".git/", ".ci/", "examples/", "scripts/"):
        assert not [p for p in context if p.startswith(top)], top
    assert "deploy/k8s-examples/secret.example.yaml" not in context


def test_the_context_holds_what_the_wheel_is_built_from() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    context = set(_context())
    needed = {"pyproject.toml", pyproject["project"]["readme"],
              pyproject["tool"]["hatch"]["version"]["path"], *wheel.get("force-include", {}),
              *(hook.get("path", "hatch_build.py") for hook in wheel.get("hooks", {}).values())}
    assert needed <= context, needed - context
    for package in [*wheel["packages"], "core"]:  # core/: installed by the build hook
        tracked = [p for p in repository_files() if p.startswith(package + "/")]
        assert tracked and set(tracked) <= context, package


def test_the_dockerignore_matcher() -> None:
    from tests.deploy.manifests import _pattern_regex

    rules = [(True, _pattern_regex("tests")), (True, _pattern_regex("**/__pycache__")),
             (True, _pattern_regex("deploy/*")), (False, _pattern_regex("deploy/a/b.json"))]
    assert not in_build_context("tests/deploy/x.py", rules)
    assert in_build_context("core/tests.py", rules)
    assert not in_build_context("core/__pycache__/a.pyc", rules)
    assert not in_build_context("__pycache__/a.pyc", rules)
    assert not in_build_context("deploy/Dockerfile", rules)
    assert in_build_context("deploy/a/b.json", rules)


def test_compose_builds_this_dockerfile() -> None:
    build = load_yaml(COMPOSE_FILE)["services"]["worker"]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == (
        ROOT / "deploy" / "Dockerfile").resolve()
    assert Path(build["dockerfile"]).name + ".dockerignore" == "Dockerfile.dockerignore"
    container = k8s_worker_container(k8s_objects(K8S))
    assert container["image"] == load_yaml(COMPOSE_FILE)["services"]["worker"]["image"]
