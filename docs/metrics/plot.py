#!/usr/bin/env python3
"""The dashboard's main panels through the scripted drain, from its scrapes.

Reads what `cargo run -p tcab-devstack --example signals` wrote (scrapes.jsonl: each
container's samples every second; run.json: what the run did and caused), evaluates the
queries of the chart's Grafana dashboard (charts/tcab-dispatcher/dashboards/tcab-dispatcher.json)
over them as Prometheus would, with Grafana's $__rate_interval, and plots the main panels into
docs/metrics/drain.png.

It also checks what the picture is for: the dashboard's death, lost-report and reap panels add
up to every death, lost report and reap the run caused, the first ones included (the series
start at 0), and exits 1 when they do not. It prints, beside, what those panels would add up to
if the series appeared at their first event instead (as they did before they were created at 0).

Usage: scripts/metrics-picture (or: python docs/metrics/plot.py DIR [--out PNG])
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
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
STEP = 5.0  # seconds between the panels' points, as Grafana's $__interval
LOOKBACK = 300.0  # Prometheus' lookback for an instant vector

Labels = tuple  # sorted (name, value) pairs


@dataclass
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]]


def load_scrapes(path: Path) -> dict[str, list[Series]]:
    """name -> its series, each sample labelled as a PodMonitor would (namespace, container)."""
    by_key: dict[tuple[str, Labels], Series] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            scrape = json.loads(line)
            for name, labels, value in scrape["samples"]:
                labels = dict(labels, namespace="tcab", container=scrape["container"])
                key = (name, tuple(sorted(labels.items())))
                series = by_key.setdefault(key, Series(labels, []))
                series.points.append((scrape["t"], float(value)))
    out: dict[str, list[Series]] = defaultdict(list)
    for (name, _), series in by_key.items():
        out[name].append(series)
    return out


# --------------------------------------------------------------------------- PromQL (a subset)


class Parser:
    """The PromQL the dashboard's panels use: sum/max/min by (...) (...), rate, increase,
    histogram_quantile, selectors with matchers and ranges."""

    TOKEN = re.compile(r"\s*(?:(\d+\.\d+|\d+)|([A-Za-z_:][A-Za-z0-9_:]*)|(=~|!=|!~|=)|(\"(?:[^\"\\]|\\.)*\")|(\[[^\]]+\])|(.))")

    def __init__(self, text: str):
        self.tokens = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = self.TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"cannot read {text[pos:]!r}")
            pos = m.end()
            number, ident, op, string, rng, other = m.groups()
            if number is not None:
                self.tokens.append(("num", float(number)))
            elif ident is not None:
                self.tokens.append(("id", ident))
            elif op is not None:
                self.tokens.append(("op", op))
            elif string is not None:
                self.tokens.append(("str", json.loads(string)))
            elif rng is not None:
                self.tokens.append(("range", rng[1:-1]))
            elif other is not None and other.strip():
                self.tokens.append(("p", other))
        self.i = 0

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else (None, None)

    def take(self, kind=None, value=None):
        tok = self.peek()
        if (kind and tok[0] != kind) or (value is not None and tok[1] != value):
            raise ValueError(f"expected {kind} {value}, got {tok}")
        self.i += 1
        return tok[1]

    def parse(self):
        node = self.expr()
        if self.peek() == ("p", ">"):  # a filter: keep the elements above a number
            self.take()
            node = ("gt", node, self.take("num"))
        if self.i != len(self.tokens):
            raise ValueError(f"left over: {self.tokens[self.i:]}")
        return node

    def expr(self):
        kind, value = self.peek()
        if kind == "num":
            return ("num", self.take())
        name = self.take("id")
        if name in ("sum", "max", "min"):
            by = []
            if self.peek() == ("id", "by"):
                self.take()
                by = self.labels()
            self.take("p", "(")
            inner = self.expr()
            self.take("p", ")")
            return ("agg", name, by, inner)
        if name in ("rate", "increase"):
            self.take("p", "(")
            sel = self.selector(self.take("id"))
            rng = self.take("range")
            self.take("p", ")")
            return ("range_fn", name, sel, rng)
        if name == "histogram_quantile":
            self.take("p", "(")
            q = self.take("num")
            self.take("p", ",")
            inner = self.expr()
            self.take("p", ")")
            return ("hq", q, inner)
        return self.selector(name)

    def labels(self):
        self.take("p", "(")
        out = []
        while self.peek() != ("p", ")"):
            out.append(self.take("id"))
            if self.peek() == ("p", ","):
                self.take()
        self.take("p", ")")
        return out

    def selector(self, name):
        matchers = []
        if self.peek() == ("p", "{"):
            self.take()
            while self.peek() != ("p", "}"):
                label = self.take("id")
                op = self.take("op")
                value = self.take("str")
                matchers.append((label, op, value))
                if self.peek() == ("p", ","):
                    self.take()
            self.take("p", "}")
        return ("sel", name, matchers)


def duration(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    total = 0.0
    for number, unit in re.findall(r"(\d+)(ms|s|m|h|d)", text):
        total += int(number) * units[unit]
    return total


def matches(labels: dict[str, str], matchers) -> bool:
    for label, op, value in matchers:
        got = labels.get(label, "")
        ok = {
            "=": got == value,
            "!=": got != value,
            "=~": re.fullmatch(value, got) is not None,
            "!~": re.fullmatch(value, got) is None,
        }[op]
        if not ok:
            return False
    return True


def extrapolated(points, start: float, end: float, is_rate: bool) -> float | None:
    """Prometheus' extrapolatedRate for a counter over (start, end]."""
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    result = last_v - first_v
    previous = first_v
    for _, v in points[1:]:
        if v < previous:  # a counter reset
            result += previous
        previous = v
    to_start, to_end = first_t - start, end - last_t
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    average = sampled / (len(points) - 1)
    if result > 0 and first_v >= 0:
        to_zero = sampled * (first_v / result)
        to_start = min(to_start, to_zero)
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    result *= interval / sampled
    return result / (end - start) if is_rate else result


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over (upper bound, cumulative count) pairs."""
    buckets = sorted(buckets)
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return None


def evaluate(node, data: dict[str, list[Series]], t: float, rate_interval: float) -> dict[Labels, float]:
    kind = node[0]
    if kind == "sel":
        _, name, matchers = node
        out = {}
        for s in data.get(name, []):
            if not matches(s.labels, matchers):
                continue
            last = [v for (pt, v) in s.points if t - LOOKBACK < pt <= t]
            if last:
                out[tuple(sorted(s.labels.items()))] = last[-1]
        return out
    if kind == "range_fn":
        _, fn, (_, name, matchers), rng = node
        width = rate_interval if rng == "$__rate_interval" else duration(rng)
        out = {}
        for s in data.get(name, []):
            if not matches(s.labels, matchers):
                continue
            window = [(pt, v) for (pt, v) in s.points if t - width < pt <= t]
            value = extrapolated(window, t - width, t, fn == "rate")
            if value is not None:
                out[tuple(sorted(s.labels.items()))] = value
        return out
    if kind == "agg":
        _, op, by, inner = node
        groups: dict[Labels, list[float]] = defaultdict(list)
        for labels, value in evaluate(inner, data, t, rate_interval).items():
            key = tuple((k, v) for k, v in labels if k in by)
            groups[key].append(value)
        reduce = {"sum": sum, "max": max, "min": min}[op]
        return {k: reduce(vs) for k, vs in groups.items()}
    if kind == "hq":
        _, q, inner = node
        groups: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
        for labels, value in evaluate(inner, data, t, rate_interval).items():
            le = dict(labels).get("le")
            key = tuple((k, v) for k, v in labels if k != "le")
            groups[key].append((float(le), value))
        out = {}
        for key, buckets in groups.items():
            value = quantile(q, buckets)
            if value is not None:
                out[key] = value
        return out
    if kind == "gt":
        _, inner, bound = node
        return {k: v for k, v in evaluate(inner, data, t, rate_interval).items() if v > bound}
    raise ValueError(f"cannot evaluate {node}")


def legend(fmt: str, labels: Labels) -> str:
    values = dict(labels)
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values.get(m.group(1), ""), fmt).strip() or "value"


def panel_lines(panel, data, times, rate_interval):
    """legend -> [(t, value)] for each target of the panel."""
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for target in panel["targets"]:
        expr = re.sub(r"\$(namespace|cluster|release)\b", ".*", target["expr"])
        node = Parser(expr).parse()
        for t in times:
            for labels, value in evaluate(node, data, t, rate_interval).items():
                lines[legend(target.get("legendFormat", ""), labels)].append((t, value))
    return lines


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


def first_seen_at_one(data: dict[str, list[Series]]) -> dict[str, list[Series]]:
    """The same scrapes as if each counter series appeared only at its first event."""
    out = {}
    for name, series in data.items():
        kept = []
        for s in series:
            points = list(s.points)
            if name.endswith("_total"):
                while points and points[0][1] == 0:
                    points.pop(0)
            if points:
                kept.append(Series(s.labels, points))
        out[name] = kept
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="where the example wrote scrapes.jsonl and run.json")
    parser.add_argument("--out", type=Path, default=HERE / "drain.png")
    args = parser.parse_args()
    run = json.loads((args.dir / "run.json").read_text(encoding="utf-8"))
    data = load_scrapes(args.dir / "scrapes.jsonl")
    scrape = run["scrape_interval_seconds"]
    # Grafana: max($__interval + the scrape interval, 4 x the scrape interval).
    rate_interval = max(STEP + scrape, 4 * scrape)
    end = max(pt for series in data.values() for s in series for pt, _ in s.points)
    times = [STEP * i for i in range(1, int(end // STEP) + 1)]

    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    by_title = {p["title"]: p for p in board["panels"] if p.get("type") != "row"}
    missing = [t for t in PANELS if t not in by_title]
    if missing:
        print(f"the dashboard has no panel {missing}")
        return 1

    problems = []
    run_length = max(times)
    for title, what in COUNTED.items():
        want = run["caused"][what]
        # The panel's query over the whole run: what a dashboard zoomed to the run shows in one
        # bar, and what the alerts and ad hoc queries read.
        whole = panel_lines(by_title[title], data, [run_length], run_length)
        shown = sum(v for line in whole.values() for _, v in line)
        before = panel_lines(by_title[title], first_seen_at_one(data), [run_length], run_length)
        shown_before = sum(v for line in before.values() for _, v in line)
        # Its bars at the panel's own step add up to the same, times Prometheus' extrapolation of
        # each window to its full width.
        bars = sum(v for line in panel_lines(by_title[title], data, times, rate_interval).values() for _, v in line)
        stretch = rate_interval / (rate_interval - scrape)
        print(
            f"{title}: {shown:.2f} over the run, the run caused {want:g}; its bars add up to {bars:.2f}"
            f" ({bars / stretch:.2f} before Prometheus' extrapolation of x{stretch:.2f});"
            f" with series that appear only at their first event it would show {shown_before:.2f}"
        )
        if round(shown) != want or round(bars / stretch) != want:
            problems.append(f"{title}: {shown:.2f} over the run and {bars / stretch:.2f} in bars shown, {want:g} caused")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = math.ceil(len(PANELS) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.6 * rows + 0.8), constrained_layout=True)
    events = [(e["t"], e["what"]) for e in run["events"]]
    for ax, title in zip(axes.flat, PANELS):
        panel = by_title[title]
        lines = panel_lines(panel, data, times, rate_interval)
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
            for name, points in sorted(lines.items()):
                if not points:
                    continue
                xs, ys = zip(*points)
                dashed = re.search(r"cap|limit|deadline|p50", name) is not None
                ax.step(xs, ys, where="post", label=name, linestyle="--" if dashed else "-")
        for n, (t, _) in enumerate(events, start=1):
            ax.axvline(t, color="grey", alpha=0.3, linewidth=0.8)
            ax.annotate(str(n), (t, 1.0), xycoords=("data", "axes fraction"), fontsize=6, color="grey",
                        ha="center", va="bottom")
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
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")
    if problems:
        print("FAIL: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
