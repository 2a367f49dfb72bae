"""Checks of the release's version numbers, run by charts/check_chart.py.

The rules are in CHANGELOG.md ("Versions"): the chart's appVersion is the workspace
version, the chart's version is semantic, and the changelog has a section for the
current version, or an Unreleased one above it while changes wait for a release.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHART_YAML = REPO / "charts" / "tcab-dispatcher" / "Chart.yaml"
CHANGELOG = REPO / "CHANGELOG.md"
SEMVER = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?")


def chart_meta() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(CHART_YAML.read_text(encoding="utf-8"))


def workspace_version() -> str:
    return tomllib.loads((REPO / "Cargo.toml").read_text(encoding="utf-8"))["workspace"]["package"]["version"]


def changelog_sections(text: str) -> list[str]:
    """The changelog's version headings (`## 1.2.3`, `## Unreleased`), in order."""
    return [m.group(1).strip() for m in re.finditer(r"^## (.+)$", text, re.MULTILINE) if m.group(1).strip() != "Versions"]


def version_problem(chart: dict[str, Any], workspace: str, changelog: str) -> str | None:
    """What is wrong with the release's versions, or None (a pure check, tested below)."""
    version, app = str(chart.get("version", "")), str(chart.get("appVersion", ""))
    if not SEMVER.fullmatch(version):
        return f"Chart.yaml version {version!r} is not semantic (x.y.z)"
    if app != workspace:
        return f"Chart.yaml appVersion {app!r} is not the workspace version {workspace!r} (Cargo.toml)"
    sections = changelog_sections(changelog)
    released = [s for s in sections if s != "Unreleased"]
    if not released:
        return "CHANGELOG.md has no released version section"
    if "Unreleased" in sections and sections.index("Unreleased") != 0:
        return "CHANGELOG.md's Unreleased section is not the first"
    if released[0] != app:
        return f"CHANGELOG.md's newest release is {released[0]!r}, the app version is {app!r}"
    return None


def checks(run: Any) -> None:
    """Registers the release checks with the chart check's runner."""

    def versions() -> str:
        chart = chart_meta()
        problem = version_problem(chart, workspace_version(), CHANGELOG.read_text(encoding="utf-8"))
        assert problem is None, problem
        return f"chart {chart['version']}, app {chart['appVersion']}"

    run.check("release: chart version semantic, appVersion = workspace version = CHANGELOG's newest release", versions)

    def rules() -> str:
        good = {"version": "0.2.0", "appVersion": "0.2.0"}
        log = "# Changelog\n\n## Unreleased\n\n## 0.2.0\n\n## 0.1.0\n\n## Versions\n"
        assert version_problem(good, "0.2.0", log) is None
        refusals = {
            "not semantic": ({"version": "2", "appVersion": "0.2.0"}, "0.2.0", log),
            "appVersion": ({"version": "0.2.0", "appVersion": "0.1.0"}, "0.2.0", log),
            "newest release": ({"version": "0.3.0", "appVersion": "0.3.0"}, "0.3.0", log),
            "not the first": (good, "0.2.0", "## 0.2.0\n\n## Unreleased\n"),
            "no released": (good, "0.2.0", "## Unreleased\n"),
        }
        for needle, (chart, workspace, text) in refusals.items():
            problem = version_problem(chart, workspace, text)
            assert problem and needle in problem, f"expected a refusal naming {needle!r}, got {problem!r}"
        return f"{len(refusals)} kinds of drift refused"

    run.check("release: the version rule refuses each kind of drift", rules)
