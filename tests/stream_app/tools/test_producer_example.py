"""examples/producer.py: no project import, and its records land on their murmur2 partitions."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.domain.models import Membership, Report
from tests.kafka_helpers import read_to_end
from tests.stream_app.tools.cli_proc import REPO, java_partition, plain_env

EXAMPLE = REPO / "examples" / "producer.py"
STDLIB = {"__future__", "argparse", "asyncio", "json", "random", "time"}


def test_the_example_imports_only_the_standard_library_and_aiokafka() -> None:
    imported = set()
    for node in ast.walk(ast.parse(EXAMPLE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= STDLIB | {"aiokafka"}, imported


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_the_example_records_follow_the_partitioning_contract(broker: EmbeddedBroker,
                                                              tmp_path: Path) -> None:
    partitions, users, reports = 4, 30, 2
    asyncio.run(create_topics(broker.bootstrap, {"reports": partitions,
                                                 "membership": partitions}))
    env = plain_env()
    env.pop("PYTHONPATH")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--bootstrap", broker.bootstrap, "--users", str(users),
         "--reports", str(reports), "--domain", "0", "1", "2"],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sent {users * (1 + reports)} records"
    seen: dict[str, set[int]] = {}
    for topic, model, count in (("membership", Membership, users),
                                ("reports", Report, users * reports)):
        records = asyncio.run(read_to_end(broker.bootstrap, topic))
        assert len(records) == count
        for rec in records:
            assert rec.key is not None and rec.value is not None
            doc = model.model_validate_json(rec.value)  # the worker's own wire model
            assert rec.key == doc.user_id.encode()
            assert rec.partition == java_partition(doc.user_id, partitions)
            seen.setdefault(topic, set()).add(rec.partition)
        assert "topic" not in json.loads(records[0].value or b"{}")
    assert seen["membership"] == seen["reports"] == set(range(partitions))  # spread over all
