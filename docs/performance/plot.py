"""Draws docs/performance/figures.png from the figures recorded in figures.tsv.

Left: each container's resident memory against the number of owned Jobs cached
(the footprint bench's `<binary> rss at <N> jobs`, both methods: `footprint-driven` solid,
`footprint`, Jobs unknown to the backend, dashed), last recorded run of each size.
Middle and right: the reaction times under load (the reaction bench's
`<what> p50|p95|p99|max`), last recorded run on the simulated cluster (`reaction-load`)
and on the real control plane (`reaction-load-real`). Run through scripts/bench-plot.
"""

import csv
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def last_values(path):
    """(bench, figure) -> (value, unit, date) of the last recorded row."""
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            out[(row["bench"], row["figure"])] = (float(row["value"]), row["unit"], row["date"])
    return out


def reaction_panel(ax, title, figures_of):
    """Bars of p50/p95/p99/max per reaction, against the 100 ms p99 target."""
    quantiles = ["p50", "p95", "p99", "max"]
    names = sorted(figures_of)
    width = 0.8 / len(quantiles)
    for i, q in enumerate(quantiles):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [figures_of[n].get(q, 0) for n in names], width, label=q)
    ax.set_xticks([j + width * 1.5 for j in range(len(names))])
    ax.set_xticklabels(names, fontsize=7, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms (log scale)")
    ax.axhline(100, color="grey", linestyle="--", linewidth=1)
    ax.set_title(title if names else f"{title}: not recorded yet")
    if names:
        ax.legend()


def main(figures, png):
    last = last_values(figures)
    # (binary, method) -> {jobs: MiB}; the driven method (the default since
    # 2026-12-02) and the method of the earlier figures, drawn side by side.
    memory = defaultdict(dict)
    reactions = {"reaction-load": defaultdict(dict), "reaction-load-real": defaultdict(dict)}
    for (bench, name), (value, unit, _) in last.items():
        m = re.fullmatch(r"(\S+) rss at (\d+) jobs", name)
        if bench in ("footprint", "footprint-driven") and m:
            memory[(m.group(1), bench)][int(m.group(2))] = value
        m = re.fullmatch(r"(.+) (p50|p95|p99|max)", name)
        if bench in reactions and m and unit == "ms":
            reactions[bench][m.group(1)][m.group(2)] = value
    if not memory and not any(reactions.values()):
        sys.exit(f"plot.py: no footprint or reaction-load figures in {figures}")

    fig, (left, *right) = plt.subplots(1, 3, figsize=(18, 7))
    colours = {}
    for (binary, bench), points in sorted(memory.items()):
        xs = sorted(points)
        driven = bench == "footprint-driven"
        colour = colours.setdefault(binary, f"C{len(colours)}")
        left.plot(
            xs,
            [points[x] for x in xs],
            marker="o",
            color=colour,
            linestyle="-" if driven else "--",
            label=f"{binary} ({'driven, as in production' if driven else 'Jobs unknown to the backend'})",
        )
    left.set_xscale("symlog", linthresh=1000)
    left.set_xlabel("owned Jobs cached")
    left.set_ylabel("resident memory (MiB)")
    left.set_title("Memory against cached Jobs (footprint)")
    left.axhline(20, color="grey", linestyle=":", linewidth=1)
    left.axhline(40, color="grey", linestyle="--", linewidth=1)
    left.legend()

    titles = {
        "reaction-load": "Reactions under load, simulated cluster",
        "reaction-load-real": "Reactions under load, real control plane",
    }
    for ax, (bench, figures_of) in zip(right, reactions.items()):
        reaction_panel(ax, titles[bench], figures_of)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"wrote {png}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
