#!/usr/bin/env python3
"""The dashboard's main panels through the scripted drain, queried from Prometheus itself.

Reads what `cargo run -p tcab-devstack --example signals` wrote (scrapes.jsonl: each
container's samples every second; run.json: what the run did and caused), turns the scrapes
into a Prometheus TSDB (OpenMetrics with timestamps, then `promtool tsdb create-blocks-from
openmetrics`), starts a throwaway `prometheus` on that TSDB on a free loopback port (it scrapes
nothing), runs the queries of the chart's Grafana dashboard
(charts/tcab-dispatcher/dashboards/tcab-dispatcher.json) through its HTTP API with Grafana's
variables substituted as Grafana would, stops it, and plots the main panels into
docs/metrics/drain.png. Needs Debian's `prometheus` package (prometheus and promtool on PATH).

It also checks what the picture is for: the dashboard's death, lost-report and reap panels add
up to every death, lost report and reap the run caused, the first ones included (the series
start at 0), and exits 1 when they do not. It prints, beside, what those panels would add up to
if the series appeared at their first event instead (as they did before they were created at 0):
a second copy of the scrapes, a day later in the same TSDB, with each counter's leading zeros
left out.

Usage: scripts/metrics-picture (or: python docs/metrics/plot.py DIR [--out PNG])
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DASHBOARD = REPO / "charts" / "tcab-dispatcher" / "dashboards" / "tcab-dispatcher.json"

# The panels drawn, by title, in reading order (4 columns).
PANELS = [
    "Lanes: in flight against the cap",
    "Admission gate",
    "Age of the last successful renewal",
    "Lane figures stale",
    "Admissions by outcome",
    "Lane saturated for",
    "Queue wait (enqueue to claim)",
    "Job view current, per container",
    "Death reports by cause",
    "Lost reports by lane",
    "Sandboxes reaped by reason",
    "Kubernetes API errors by verb and reason",
]
# The panels whose increases must add up to what the run caused.
COUNTED = {
    "Death reports by cause": "deaths",
    "Lost reports by lane": "lost",
    "Sandboxes reaped by reason": "reaped",
}
STEP = 5.0  # seconds between the panels' points: the query_range step, and Grafana's $__interval
# The run's second 0, in seconds since the epoch, in the TSDB (any time will do: Prometheus judges
# retention against the newest block, not the clock). The copy whose counters appear only at their
# first event lies a day later, far beyond the 5-minute lookback of the first copy's queries.
BASE = 1_767_225_600.0  # 2026-01-01T00:00:00Z
FIRST_SEEN_BASE = BASE + 86_400.0
# The target labels a PodMonitor gives each sample: the dev stack's namespace and one pod of
# three containers (the container label is each sample's own).
TARGET = {"namespace": "tcab", "pod": "tcab-dispatcher-devstack", "job": "tcab/tcab-dispatcher"}

Labels = tuple  # sorted (name, value) pairs
Points = list  # [(seconds into the run, value)]


class Fail(Exception):
    """A reason to stop, said in one line."""


# --------------------------------------------------------------------------- scrapes -> TSDB


def load_scrapes(path: Path) -> dict[tuple[str, Labels], Points]:
    """(name, labels) -> the series' samples in time order, labelled as a PodMonitor would."""
    series: dict[tuple[str, Labels], Points] = defaultdict(list)
    with path.open(encoding="utf-8") as f:
        for line in f:
            scrape = json.loads(line)
            for name, labels, value in scrape["samples"]:
                labels = dict(labels, **TARGET, container=scrape["container"])
                series[(name, tuple(sorted(labels.items())))].append((scrape["t"], float(value)))
    for points in series.values():
        points.sort()
    return series


def first_seen_at_one(series: dict[tuple[str, Labels], Points]) -> dict[tuple[str, Labels], Points]:
    """The same scrapes as if each counter series appeared only at its first event."""
    out = {}
    for (name, labels), points in series.items():
        points = list(points)
        if name.endswith("_total"):
            while points and points[0][1] == 0:
                points.pop(0)
        if points:
            out[(name, labels)] = points
    return out


def om_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def om_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_openmetrics(copies: list[tuple[float, dict[tuple[str, Labels], Points]]], path: Path) -> None:
    """Every sample of every copy, each shifted by its base, as OpenMetrics with timestamps.

    The metrics go untyped (no TYPE line: OpenMetrics' `unknown`), which keeps each name as
    scraped (`_total`, `_bucket`); a family's samples are written together, each series' in time
    order, as the format asks.
    """
    by_name: dict[str, list[tuple[float, Labels, Points]]] = defaultdict(list)
    for base, series in copies:
        for (name, labels), points in series.items():
            by_name[name].append((base, labels, points))
    with path.open("w", encoding="utf-8") as f:
        for name in sorted(by_name):
            for base, labels, points in sorted(by_name[name], key=lambda e: (e[1], e[0])):
                text = ",".join(f'{k}="{om_label(v)}"' for k, v in labels)
                for t, v in points:
                    f.write(f"{name}{{{text}}} {om_value(v)} {base + t:.3f}\n")
        f.write("# EOF\n")


def tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise Fail(
            f"{name} is not installed: the picture is computed by Prometheus itself "
            "(Debian: apt-get install prometheus, which brings prometheus and promtool)"
        )
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A throwaway Prometheus on a TSDB made from the scrapes, on loopback, scraping nothing."""

    def __init__(self, copies, workdir: Path):
        self.workdir = workdir
        self.data = workdir / "data"
        self.proc: subprocess.Popen | None = None
        self.url = ""
        # Loopback only: no proxy from the environment.
        self.http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        om = workdir / "scrapes.om"
        write_openmetrics(copies, om)
        done = subprocess.run(
            [tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(om), str(self.data)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise Fail(f"promtool tsdb create-blocks-from openmetrics failed: {done.stdout}{done.stderr}".strip())

    def __enter__(self) -> Prometheus:
        config = self.workdir / "prometheus.yml"
        config.write_text("# No scrape configs: it serves the blocks made from the scrapes.\nglobal: {}\n")
        binary = tool("prometheus")
        for _ in range(3):  # a port taken between the pick and the bind: pick another
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            self.log = self.workdir / "prometheus.log"
            with self.log.open("w") as log:
                self.proc = subprocess.Popen(
                    [
                        binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={self.data}",
                        "--storage.tsdb.retention.time=100y",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            if self.wait_ready():
                return self
            self.stop()
        raise Fail(f"prometheus did not start; its log:\n{self.log.read_text()[-2000:]}")

    def wait_ready(self) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with self.http.open(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __exit__(self, *_exc) -> None:
        self.stop()

    def api(self, path: str, **params) -> list[dict]:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with self.http.open(url, timeout=60) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as e:  # a bad query: Prometheus says why in the body
            body = json.load(e)
        if body.get("status") != "success":
            raise Fail(f"prometheus refused {params.get('query')!r}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]

    def query_range(self, expr: str, base: float, start: float, end: float, step: float) -> list[tuple[dict, Points]]:
        """Each series of a range query: its labels and (seconds into the run, value) points."""
        result = self.api("query_range", query=expr, start=base + start, end=base + end, step=step)
        return [(r["metric"], [(float(t) - base, float(v)) for t, v in r["values"]]) for r in result]

    def query(self, expr: str, at: float) -> list[tuple[dict, float]]:
        return [(r["metric"], float(r["value"][1])) for r in self.api("query", query=expr, time=at)]


# --------------------------------------------------------------------------- Grafana's variables


def duration(seconds: float) -> str:
    """A PromQL duration, as Grafana writes an interval."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")


def substitute(expr: str, board: dict, interval: float, rate_interval: float, range_s: float) -> str:
    """The query Grafana sends: its own variables at the panel's interval and the time range, and
    every template variable of the dashboard as "All" selected, a match-all regex.

    `.*` rather than each variable's allValue: it also matches a series without the label (the
    dev stack's have no cluster or release label of their own), as a single-cluster
    Prometheus's would.
    """
    builtin = {
        "__interval": duration(interval),
        "__interval_ms": str(round(interval * 1000)),
        "__rate_interval": duration(rate_interval),
        "__rate_interval_ms": str(round(rate_interval * 1000)),
        "__range": duration(range_s),
        "__range_s": str(round(range_s)),
        "__range_ms": str(round(range_s * 1000)),
    }
    templated = {
        v["name"]: ".*"
        for v in board.get("templating", {}).get("list", [])
        if v.get("type") != "datasource"  # a data source, not a value a query reads
    }

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtin:
            return builtin[name]
        if name in templated:
            return templated[name]
        raise Fail(f"the query {expr!r} reads ${name}, which neither Grafana nor the dashboard's templating defines")

    return VARIABLE.sub(value, expr)


# --------------------------------------------------------------------------- panels


def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip() or "value"


class Board:
    def __init__(self, prom: Prometheus, board: dict, scrape: float, end: float):
        self.prom = prom
        self.board = board
        self.scrape = scrape
        self.end = end
        # Grafana: max($__interval + the scrape interval, 4 x the scrape interval).
        self.rate_interval = max(STEP + scrape, 4 * scrape)
        self.first = STEP
        self.last = STEP * math.floor(end / STEP)

    def steps(self) -> list[float]:
        """The times of a range query's points, in seconds into the run."""
        return [self.first + STEP * i for i in range(round((self.last - self.first) / STEP) + 1)]

    def lines(self, panel: dict) -> dict[str, Points]:
        """legend -> [(t, value)] for each target of the panel, at the panel's step."""
        out: dict[str, Points] = defaultdict(list)
        for target in panel["targets"]:
            expr = substitute(target["expr"], self.board, STEP, self.rate_interval, self.last)
            for labels, points in self.prom.query_range(expr, BASE, self.first, self.last, STEP):
                out[legend(target.get("legendFormat", ""), labels)].extend(points)
        return out

    def whole_run(self, panel: dict, base: float) -> float:
        """The panel's queries over the whole run, summed: what a dashboard zoomed to the run
        shows in one bar (its interval the run's length), and what alerts and ad hoc queries read."""
        total = 0.0
        for target in panel["targets"]:
            expr = substitute(target["expr"], self.board, self.last, self.last, self.last)
            total += sum(v for _, v in self.prom.query(expr, base + self.last))
        return total


def draw_states(ax, panel, lines) -> None:
    """A state timeline: one band per series, coloured by the panel's value mappings."""
    mapping = {}
    for m in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        for value, shown in m.get("options", {}).items():
            mapping[float(value)] = (shown.get("text", value), shown.get("color", "grey"))
    names = sorted(lines)
    seen = {}
    for row, name in enumerate(names):
        for t, v in lines[name]:
            text, color = mapping.get(float(v), (f"{v:g}", "grey"))
            ax.broken_barh([(t, STEP)], (row + 0.1, 0.8), facecolors=color, alpha=0.8)
            seen[text] = color
    ax.set_yticks([row + 0.5 for row in range(len(names))], names, fontsize=7)
    ax.set_ylim(0, max(len(names), 1))
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=t) for t, c in seen.items()], fontsize=6, loc="upper right")


def plot(board: Board, by_title: dict, run: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = math.ceil(len(PANELS) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.6 * rows + 0.8), constrained_layout=True)
    events = [(e["t"], e["what"]) for e in run["events"]]
    for ax, title in zip(axes.flat, PANELS):
        panel = by_title[title]
        lines = board.lines(panel)
        bars = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("drawStyle") == "bars"
        state = panel["type"] == "state-timeline"
        if state:
            draw_states(ax, panel, lines)
        elif bars:
            bottoms: dict[float, float] = defaultdict(float)
            for name, points in sorted(lines.items()):
                xs = [t for t, _ in points]
                ys = [v for _, v in points]
                ax.bar(xs, ys, width=STEP * 0.8, bottom=[bottoms[x] for x in xs], label=name, alpha=0.85)
                for x, y in points:
                    bottoms[x] += y
        else:
            if len(lines) > 10:  # the default cycle has 10 colours; a repeated one reads as one line
                ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
            for name, points in sorted(lines.items()):
                if not points:
                    continue
                # A step without an answer is a gap, as Grafana leaves it (not a line across it).
                at = {round(t, 3): v for t, v in points}
                xs = board.steps()
                ys = [at.get(round(t, 3), math.nan) for t in xs]
                dashed = re.search(r"cap|limit|deadline|p50", name) is not None
                ax.step(xs, ys, where="post", label=name, linestyle="--" if dashed else "-")
        for n, (t, _) in enumerate(events, start=1):
            ax.axvline(t, color="grey", alpha=0.3, linewidth=0.8)
            ax.annotate(str(n), (t, 1.0), xycoords=("data", "axes fraction"), fontsize=6, color="grey",
                        ha="center", va="bottom")
        ax.set_xlim(0, board.last + STEP)  # every panel over the whole run, as on one dashboard
        ax.set_title(title, fontsize=10)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit == "s":
            ax.set_ylabel("seconds", fontsize=8)
        ax.tick_params(labelsize=7)
        if lines and not state:
            ax.legend(fontsize=6, loc="upper right", ncol=2 if len(lines) > 4 else 1)
    for ax in axes.flat[len(PANELS):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("seconds into the run", fontsize=8)
    notes = ", ".join(f"{n} {what.split(':')[0].split(' (')[0]}" for n, (_, what) in enumerate(events, start=1))
    fig.suptitle(
        "The dashboard's main panels through a scripted drain with faults\n(grey lines: " + notes + ")",
        fontsize=10,
    )
    fig.savefig(out, dpi=80)


def check(board: Board, by_title: dict, run: dict) -> list[str]:
    """The death, lost-report and reap panels against what the run caused."""
    problems = []
    stretch = board.rate_interval / (board.rate_interval - board.scrape)
    for title, what in COUNTED.items():
        panel = by_title[title]
        want = run["caused"][what]
        shown = board.whole_run(panel, BASE)
        shown_before = board.whole_run(panel, FIRST_SEEN_BASE)
        # Its bars at the panel's own step add up to the same, times Prometheus' extrapolation of
        # each window (one scrape interval short of its width) to the full width.
        bars = sum(v for points in board.lines(panel).values() for _, v in points)
        print(
            f"{title}: {shown:.2f} over the run, the run caused {want:g}; its bars add up to {bars:.2f}"
            f" ({bars / stretch:.2f} before Prometheus' extrapolation of x{stretch:.2f});"
            f" with series that appear only at their first event it would show {shown_before:.2f}"
        )
        if round(shown) != want or round(bars / stretch) != want:
            problems.append(f"{title}: {shown:.2f} over the run and {bars / stretch:.2f} in bars shown, {want:g} caused")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where the example wrote scrapes.jsonl and run.json")
    parser.add_argument("--out", type=Path, default=HERE / "drain.png")
    args = parser.parse_args()
    try:
        for name in ("promtool", "prometheus"):
            tool(name)
        run = json.loads((args.dir / "run.json").read_text(encoding="utf-8"))
        series = load_scrapes(args.dir / "scrapes.jsonl")
        if not series:
            raise Fail(f"no samples in {args.dir / 'scrapes.jsonl'}")
        end = max(t for points in series.values() for t, _ in points)

        dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        by_title = {p["title"]: p for p in dashboard["panels"] if p.get("type") != "row"}
        missing = [t for t in PANELS if t not in by_title]
        if missing:
            raise Fail(f"the dashboard has no panel {missing}")

        with tempfile.TemporaryDirectory(prefix="tcab-picture-") as tmp:
            copies = [(BASE, series), (FIRST_SEEN_BASE, first_seen_at_one(series))]
            with Prometheus(copies, Path(tmp)) as prom:
                version = prom.http.open(f"{prom.url}/api/v1/status/buildinfo", timeout=10)
                print(f"querying Prometheus {json.load(version)['data']['version']} on {prom.url}")
                board = Board(prom, dashboard, run["scrape_interval_seconds"], end)
                problems = check(board, by_title, run)
                plot(board, by_title, run, args.out)
    except Fail as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}")
    if problems:
        print("FAIL: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
