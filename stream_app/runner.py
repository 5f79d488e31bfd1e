"""``pufferfish run``: start one worker (blocking) against the configured broker.

Settings come from ``PUFFERFISH_*`` env vars and an optional JSON file (``--config`` or
``PUFFERFISH_CONFIG_FILE``). Missing topics are created first with the configured partition
counts (Faust does not create source topics; a broker may auto-create them with another count).
SIGTERM / SIGINT stop the worker cleanly (Faust's worker handles both).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from core.errors import PufferfishInputError
from stream_app import log_safety
from stream_app.settings import Settings, load_settings

log = logging.getLogger("stream_app.runner")

_TOPIC_ALREADY_EXISTS = 36


class TopicSetupError(RuntimeError):
    """A topic is missing after creation or exists with the wrong partition count."""


def topic_configs(settings: Settings, name: str) -> dict[str, str]:
    """The releases and priors topics are journals: they must never expire or be compacted."""
    if name in (settings.topic_releases, settings.topic_priors):
        return {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
    return {}


def wanted_topics(settings: Settings) -> dict[str, int]:
    return {
        settings.topic_reports: settings.input_partitions,
        settings.topic_membership: settings.input_partitions,
        settings.topic_partials: 1,
        settings.topic_releases: 1,
        settings.topic_priors: 1,
        settings.topic_deadletter: 1,
    }


async def ensure_topics(settings: Settings, timeout: float = 30.0) -> None:
    """Create missing topics; refuse input topics whose partition count differs (bounded)."""
    wanted = wanted_topics(settings)
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        admin = AIOKafkaAdminClient(**settings.aiokafka_kwargs(), request_timeout_ms=10_000)
        try:
            await admin.start()
            existing = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(None)}
            missing = [n for n in wanted if n not in existing]
            if missing:
                resp = await admin.create_topics(
                    [
                        NewTopic(n, wanted[n], replication_factor=1,
                                 topic_configs=topic_configs(settings, n))
                        for n in missing
                    ]
                )
                for name, code, *_ in resp.topic_errors:
                    if code not in (0, _TOPIC_ALREADY_EXISTS):
                        raise TopicSetupError(
                            f"topic {name!r}: creation refused (Kafka error {code})"
                        )
                existing = {
                    t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(None)
                }
            wrong = {n: existing.get(n) for n, p in wanted.items() if existing.get(n) != p}
            if not wrong:
                return
            if any(c is not None for c in wrong.values()):
                detail = ", ".join(
                    f"{n!r} has {c} partitions, expected {wanted[n]}"
                    for n, c in wrong.items() if c is not None
                )
                raise TopicSetupError(detail)
        except TopicSetupError:
            raise
        except Exception as exc:  # noqa: BLE001 - broker not reachable yet: retry until deadline
            last = exc
        finally:
            try:
                await admin.close()
            except Exception:  # noqa: BLE001
                pass
        await asyncio.sleep(0.5)
    raise TopicSetupError(f"broker {settings.broker} not reachable in {timeout:g} s ({last!r})")


def run_worker(settings: Settings) -> None:
    """Run one worker until SIGTERM/SIGINT (blocking)."""
    import faust

    from stream_app.metrics import Metrics
    from stream_app.worker import PufferfishApp

    log_safety.install()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    metrics = Metrics.create()
    worker_app = PufferfishApp(settings, metrics)  # checks priors and calibration first
    loop.run_until_complete(ensure_topics(settings))
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_host, settings.metrics_port)
    worker = faust.Worker(
        worker_app.app, loglevel=settings.log_level.upper(), quiet=True, loop=loop,
        redirect_stdouts=False,
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


def _error(message: str) -> int:
    print(f"pufferfish: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pufferfish run",
        description="Run a pufferfish-stream worker (settings: PUFFERFISH_* env vars, JSON file).",
    )
    parser.add_argument("--config", help="JSON settings file (same as PUFFERFISH_CONFIG_FILE)")
    parser.add_argument("--broker", help="broker URL, e.g. kafka://localhost:9092")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        settings = load_settings(args.config, {"broker": args.broker} if args.broker else {})
        run_worker(settings)
    except (PufferfishInputError, TopicSetupError) as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
