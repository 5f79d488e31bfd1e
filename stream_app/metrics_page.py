"""Reading a worker's /metrics page: the one parser of the Prometheus text format the project
uses (the demo, the tools' checks, the tests)."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

# (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def local_url(port: int) -> str:
    """The /metrics URL of a worker serving on this loopback port."""
    return f"http://127.0.0.1:{port}/metrics"


def fetch(url: str, timeout: float = 2.0) -> str | None:
    """The /metrics page as text (None while it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def parse(text: str) -> Samples:
    """Every sample of a page in the Prometheus text format: the one parser."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def scrape(url: str, timeout: float = 2.0) -> Samples:
    """Every sample of a /metrics page ({} while it does not answer)."""
    text = fetch(url, timeout)
    return {} if text is None else parse(text)


def sample(samples: Samples, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The value of one sample (exactly these labels), None when absent."""
    return samples.get((name, tuple(sorted((labels or {}).items()))))


def totals(samples: Samples) -> dict[str, float]:
    """Sample values summed over labels, by sample name."""
    out: dict[str, float] = {}
    for (name, _), value in samples.items():
        out[name] = out.get(name, 0.0) + value
    return out
