"""The demo's printing (exact sum next to each release, theta changes, --quiet) and its PNG,
without a broker."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from stream_app.demo.demo_plot import comparison_text, draw, plot_run, write_plot
from stream_app.demo.demo_view import HEADER, DemoView, Point, Round, Truth
from stream_app.demo.demo_worker import truth_line
from stream_app.demo.journal_lines import release_line, round_line
from stream_app.domain.models import Partial


def _release(seq: int, noisy: float, theta: float, spent: float, priors_seq: int) -> bytes:
    return json.dumps({
        "seq": seq, "ts": 1000.0 + seq, "noisy_sum": noisy, "theta": theta, "epsilon": 1.0,
        "epsilon_spent": spent, "epsilon_remaining": 50.0 - spent, "pairs": [], "rule": "k",
        "priors_seq": priors_seq, "charge": 1.0,
    }).encode()


def _round(seq: int, spent: float) -> bytes:
    return json.dumps({
        "seq": seq, "ts": 1000.5 + seq, "group": "default", "support": [1.0, 2.0],
        "probs": [0.25, 0.75], "epsilon_learn": 1.0, "epsilon_spent": spent, "radius": 0.125,
        "status": "learned",
    }).encode()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tap(path: Path, seq: int, units: dict[int, int]) -> None:
    partials = {p: Partial(partition=p, sum_units=u, newest_ts=float(p)) for p, u in units.items()}
    with open(path, "a", encoding="utf-8") as f:
        f.write(truth_line(seq, -10, partials) or "")


def _view(tmp_path: Path, quiet: bool = False) -> tuple[DemoView, list[str], _Clock, Path]:
    lines: list[str] = []
    clock = _Clock()
    truth = tmp_path / "truth.jsonl"
    truth.touch()
    return DemoView(50.0, Truth(truth), quiet=quiet, say=lines.append, clock=clock), lines, \
        clock, truth


def test_release_waits_for_its_exact_sum_and_keeps_journal_order(tmp_path: Path) -> None:
    view, lines, clock, truth = _view(tmp_path)
    view.header()
    assert lines == [HEADER]
    view.on_release(_release(1, 103.5, 16.0, 1.0, 0))
    view.on_round(_round(1, 2.0))
    view.pump()
    assert lines == [HEADER]  # the release waits for the tap; the round waits behind it
    _tap(truth, 1, {0: 40 * 1024, 1: 60 * 1024 + 512})
    with open(truth, "a") as f:
        f.write('{"seq": 2, "grid_')  # a half-written line is left for the next poll
    view.pump()
    assert lines[1] == ("release seq=1 noisy_sum=103.50 exact_sum=100.50 error=+3.00 "
                        "theta=16.0000 sd=22.63 epsilon_spent=1.0000/50 priors_seq=0")
    assert lines[2] == round_line(_round(1, 2.0))[0]
    # a new law: the theta change is announced with the first release that uses it
    view.on_release(_release(2, 90.0, 4.0, 3.0, 1))
    view.pump()
    assert len(lines) == 3
    clock.now = 11.0  # no exact sum within TRUTH_WAIT_SECONDS: printed without it
    view.pump()
    assert lines[3] == "theta 16.0000 -> 4.0000 after learning round seq=1 (sd 22.63 -> 5.66)"
    assert lines[4].startswith("release seq=2 noisy_sum=90.00 exact_sum=n/a error=n/a theta=4")
    view.on_release(_release(3, 91.0, 4.0, 5.0, 2))  # a round that left theta as it was
    view.pump(final=True)
    assert lines[5] == "theta stays 4.0000 after learning round seq=2"
    assert [p.seq for p in view.points] == [1, 2, 3] and view.points[0].exact == 100.5
    assert view.releases == 3 and view.round_records == 1
    assert view.rounds == [Round(1, 1001.5, "default", "learned", 0.125, 2.0)]


def test_groups_of_a_release_their_exact_sums_and_their_panel(tmp_path: Path) -> None:
    """release_by_group: each group's published noisy sum and sd, its exact sum from the tap
    (the partials' group totals), the total's sd the published one, and a panel per group."""
    import matplotlib.pyplot as plt

    view, _, _, truth = _view(tmp_path)
    record = json.loads(_release(1, 12.5, 9.0, 1.0, 0))
    record["noise_sd"] = 7.25
    record["groups"] = {g: {"noisy_sum": v, "theta": 4.0, "noise_sd": sd,
                            "ci95_half_width": 3 * sd, "noisy_count": 3.0, "count_theta": 2.0,
                            "count_noise_sd": 2.8, "count_ci95_half_width": 6.0}
                        for g, v, sd in (("even", 4.5, 5.5), ("odd", 8.0, 4.75))}
    view.on_release(json.dumps(record).encode())
    partials = {p: Partial(partition=p, sum_units=u, newest_ts=1.0,
                           group_totals={"even": [u - 1024, 2], "odd": [1024, 1]})
                for p, u in ((0, 5 * 1024), (1, 3 * 1024))}
    with open(truth, "a", encoding="utf-8") as f:
        f.write(truth_line(1, -10, partials) or "")
    view.fill_exact()
    point = view.points[0]
    assert point.exact == 8.0 and point.sd == 7.25  # not theta x sqrt 2: the groups' draws
    assert point.groups is not None
    assert {g: (x.noisy, x.sd, x.exact) for g, x in point.groups.items()} == {
        "even": (4.5, 5.5, 6.0), "odd": (8.0, 4.75, 2.0)}
    fig = draw(view.points, [], 50.0, 995.0)
    try:
        panel = next(a for a in fig.axes if a.get_ylabel() == "sum per group")
        labels = {t.get_text() for t in panel.get_legend().get_texts()}
        assert {"even: ± 2 sd", "odd: ± 2 sd", "odd: noisy sum (published)",
                "even: exact sum (this simulation only)"} <= labels
        assert len([a for a in fig.axes if a.get_ylabel()]) == 3
    finally:
        plt.close(fig)
    path = write_plot(tmp_path / "groups.png", view.points, [], 50.0, 995.0)
    assert 900 <= _png_size(path)[1] <= 1500


def test_quiet_prints_the_terse_lines_unchanged(tmp_path: Path) -> None:
    view, lines, _, _ = _view(tmp_path, quiet=True)
    view.header()
    records = [_release(1, 10.0, 16.0, 1.0, 0), _round(1, 2.0), _release(2, 12.0, 4.0, 3.0, 1)]
    view.on_release(records[0])
    view.on_round(records[1])
    view.on_release(records[2])
    view.pump()  # no waiting for exact sums
    assert lines == [release_line(records[0])[0], round_line(records[1])[0],
                     release_line(records[2])[0]]
    assert lines[0] == ("release seq=1 theta=16.0000 noisy_sum=10.00 priors_seq=0 "
                        "epsilon_left=49.0000")


def test_unreadable_records_are_said_and_not_counted(tmp_path: Path) -> None:
    view, lines, _, _ = _view(tmp_path)
    view.on_release(b"{not json")
    view.on_round(None)
    view.pump()
    assert lines == ["release: (unreadable record skipped)",
                     "learning round: (unreadable record skipped)"]
    assert view.releases == 0 and view.round_records == 0 and not view.points


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plot_is_a_png_of_sensible_size(tmp_path: Path) -> None:
    points = [Point(seq=i, ts=100.0 + 2 * i, noisy=300.0 + 10 * math.sin(i), theta=8.0,
                    spent=float(i), priors_seq=0, exact=300.0) for i in range(1, 21)]
    points[-1].exact = None  # a release whose exact sum never came: noisy dot only
    rounds = [Round(1, 105.0, "default", "learned", 0.1, 4.0)]
    path = write_plot(tmp_path / "sub" / "demo.png", points, rounds, 50.0, t0=95.0)
    width, height = _png_size(path)
    assert 800 <= width <= 2000 and 500 <= height <= 1500
    assert 20_000 < path.stat().st_size < 2_000_000


def test_plot_without_releases_still_writes_a_png(tmp_path: Path) -> None:
    view, _, _, _ = _view(tmp_path)
    line, ok = plot_run(tmp_path / "empty.png", view, 50.0, t0=0.0)
    assert ok and line.startswith(f"plot: {tmp_path / 'empty.png'} ")
    _png_size(tmp_path / "empty.png")


def test_plot_error_is_one_line(tmp_path: Path) -> None:
    view, _, _, _ = _view(tmp_path)
    (tmp_path / "file").write_text("x")
    line, ok = plot_run(tmp_path / "file" / "x.png", view, 50.0, t0=0.0)
    assert not ok and line.startswith("plot not written: ") and "\n" not in line


@pytest.mark.parametrize(("argv", "field"), [
    (["--plot", "out.jpg"], "plot"),
    (["--plot", "x.png", "--no-plot"], "plot"),
])
def test_plot_arguments(argv: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    from stream_app.demo.demo import main

    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"pufferfish: error: {field}: ")


def _tree_release(seq: int, noisy: float, nodes: list[str]) -> bytes:
    """A tree-mode release as the worker publishes it (docs/design.md, "Continual release:
    wiring the tree"): theta is the node scale, nodes the draws it adds up."""
    return json.dumps({
        "seq": seq, "ts": 1000.0 + seq, "noisy_sum": noisy, "theta": 7.8125, "epsilon": 0.5,
        "epsilon_spent": 9.6, "epsilon_remaining": 0.4, "pairs": [], "rule": "exact",
        "priors_seq": 0, "charge": 9.6 if seq == 1 else 0.0, "mechanism": "tree", "tick": seq,
        "window_tick": seq - 1, "nodes": nodes, "arity": 15, "max_changes_per_window": 4,
    }).encode()


def test_a_tree_release_counts_its_draws(tmp_path: Path) -> None:
    view, lines, _, truth = _view(tmp_path)
    view.on_release(_tree_release(1, 12.0, ["base"]))
    view.on_release(_tree_release(4, 10.0, ["base", "1.0", "0.14", "0.15"]))
    _tap(truth, 1, {0: 5 * 1024})
    _tap(truth, 4, {0: 5 * 1024})
    view.pump()
    one, four = view.points
    assert (one.draws, four.draws) == (1, 4) and four.mechanism == "tree"
    # four independent draws of scale 7.8125: sd 7.8125 x sqrt(2) x sqrt(4) = 22.097
    assert four.sd == pytest.approx(7.8125 * math.sqrt(8))
    assert lines[1] == ("release seq=4 noisy_sum=10.00 exact_sum=5.00 error=+5.00 "
                        "theta=7.8125 draws=4 sd=22.10 epsilon_spent=9.6000/50 priors_seq=0")


def _tree_points() -> list[Point]:
    return [Point(seq=i, ts=100.0 + 2 * i, noisy=300.0 + 20 * math.sin(i), theta=7.8125,
                  spent=9.6, priors_seq=0, exact=300.0, draws=4, mechanism="tree")
            for i in range(1, 21)]


def test_plot_compares_with_independent_releases_at_the_same_budget(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    points = _tree_points()
    fig = draw(points, [], 10.0, 95.0, independent_sd=6364.0)
    try:
        top, middle, bottom = fig.axes[:3]
        assert len([a for a in fig.axes if a.get_ylabel()]) == 3
        assert middle.get_ylim() == pytest.approx((-2.3 * 6364.0, 2.3 * 6364.0))
        labels = [t.get_text() for t in middle.get_legend().get_texts()]
        assert "± 2 sd of independent releases at the same budget" in labels
        texts = [t.get_text() for t in middle.texts]
        # every release: sd 7.8125 x sqrt(8) = 22.097; 6,364 / 22.097 = 288
        assert texts == ["independent releases at the same budget: sd 6,364, 288x this run's "
                         "22.1"]
    finally:
        plt.close(fig)
    plain = draw(points, [], 10.0, 95.0)
    try:
        assert len([a for a in plain.axes if a.get_ylabel()]) == 2
    finally:
        plt.close(plain)
    path = write_plot(tmp_path / "tree.png", points, [], 10.0, 95.0, independent_sd=6364.0)
    width, height = _png_size(path)
    assert 800 <= width <= 2000 and 900 <= height <= 1500


def test_comparison_text_without_releases() -> None:
    assert comparison_text([], 40.0) == "independent releases at the same budget: sd 40"


@pytest.mark.usefixtures("clean_env")
def test_the_comparison_band_is_plans_independent_sd_at_the_same_budget() -> None:
    from stream_app.demo.worker_process import comparison_sd
    from stream_app.settings import Settings

    common = {"domain": [0, 1, 2, 3, 4, 5], "pairs": ["value_change", "value_presence"],
              "release_period_seconds": 2, "budget_window_seconds": 600, "budget_total": 10,
              "learn_period_seconds": 60, "epsilon_learn": 0.1}
    assert comparison_sd(Settings(**common)) is None  # independent mode: nothing to compare
    sd = comparison_sd(Settings(**common, release_mechanism="tree"))
    # 300 ticks, 10 rounds x 0.1 leave 9: theta 300 x 5 / 9 on the 2^-10 grid
    theta, grid = 300 * 5 / 9, 2.0**-10
    q = math.exp(-grid / theta)
    assert sd == pytest.approx(grid * math.sqrt(2 * q) / (1 - q), rel=1e-9)


def test_the_truth_of_a_tree_release_is_the_admitted_sum_of_its_window() -> None:
    partials = {
        0: Partial(partition=0, sum_units=900, window=7, admitted_units=500),  # held changes
        1: Partial(partition=1, sum_units=300, window=8, admitted_units=40, previous_units=250),
        2: Partial(partition=2, sum_units=70, window=7, admitted_units=70),
    }
    doc = json.loads(truth_line(3, -10, partials, window=7) or "")
    assert doc["partitions"] == {"0": [500, 0.0], "1": [250, 0.0], "2": [70, 0.0]}
    # independent: the raw sums, as before
    raw = json.loads(truth_line(3, -10, partials) or "")
    assert [v[0] for v in raw["partitions"].values()] == [900, 300, 70]
    # a partition two windows ahead cannot tell window 7's final sum (the releaser repeats the
    # window's last exact sum), nor can one behind it (the releaser waits): no line
    ahead = {0: Partial(partition=0, sum_units=1, window=9, admitted_units=1, previous_units=1)}
    assert truth_line(3, -10, ahead, window=7) is None
    assert truth_line(3, -10, {2: Partial(partition=2, sum_units=70)}, window=7) is None
