"""Gauges of the latest published release's values and error bars (operator-facing, their own
metric names so that an operator can expose only them). Set only from a release record this
worker has published: every value is the record's (settings, published laws and fresh noise),
never an exact sum or count.

Series: the release's total under ``group=""`` (Prometheus reads an empty label as no label:
``pufferfish_released_sum_noisy{group=""}`` is the unlabelled total), each configured group
under its name with ``release_by_group``. ``pufferfish_released_seq`` is the seq of the
release shown (after a change of release owner, the newest seq tells which worker's gauges
are current). No name ends in ``_sum`` or ``_count``: Prometheus reserves those suffixes for
histograms and summaries.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from stream_app.domain.outputs import Release

TOTAL = ""  # the group label of the release's total

RELEASED_METRIC_NAMES = (
    "pufferfish_released_seq",
    "pufferfish_released_sum_noisy",
    "pufferfish_released_sum_noise_sd",
    "pufferfish_released_count_noisy",
    "pufferfish_released_count_noise_sd",
)


class ReleasedValues:
    """The gauges, on one worker's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, what: str, labels: list[str]) -> Gauge:
            return Gauge(name, what, labels, registry=registry)

        self.seq = gauge("pufferfish_released_seq",
                         "seq of the latest release this worker published", [])
        self.noisy_sum = gauge("pufferfish_released_sum_noisy",
                               "noisy_sum of the latest release (group=\"\": its total; else "
                               "that group's, release_by_group)", ["group"])
        self.noise_sd = gauge("pufferfish_released_sum_noise_sd",
                              "noise_sd of that noisy_sum (its noise's standard deviation)",
                              ["group"])
        self.noisy_count = gauge("pufferfish_released_count_noisy",
                                 "noisy_count of a group in the latest release "
                                 "(release_by_group)", ["group"])
        self.count_noise_sd = gauge("pufferfish_released_count_noise_sd",
                                    "count_noise_sd of that noisy_count", ["group"])

    def show(self, record: Release) -> None:
        """The published ``record``'s values (a record without noise_sd: an older format, its
        sd gauge is left alone)."""
        self.seq.set(record.seq)
        self.noisy_sum.labels(group=TOTAL).set(record.noisy_sum)
        if record.noise_sd is not None:
            self.noise_sd.labels(group=TOTAL).set(record.noise_sd)
        for group, got in (record.groups or {}).items():
            self.noisy_sum.labels(group=group).set(got.noisy_sum)
            self.noise_sd.labels(group=group).set(got.noise_sd)
            self.noisy_count.labels(group=group).set(got.noisy_count)
            self.count_noise_sd.labels(group=group).set(got.count_noise_sd)
