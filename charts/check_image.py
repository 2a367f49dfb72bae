"""Checks of the root Dockerfile and .dockerignore, run by charts/check_chart.py.

No container engine runs in CI, so the Dockerfile is read with buildkit's own
parser (the PyPI package `dockerfile`, pinned in charts/requirements.txt) and
checked against the facts it must agree with: the workspace's binaries, the
chart's container commands and runAsUser, the toolchain CI builds with, and the
release build command scripts/test runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
TEST_SCRIPT = REPO / "scripts" / "test"
REVISION_SOURCE = REPO / "bins" / "revision.rs"
BIN_DIR = "/usr/local/bin/"
# The release build: cargo-auditable wraps `cargo build` and embeds each binary's
# dependency list in its `.dep-v0` section (zlib-compressed JSON).
BUILD = "cargo auditable build"
AUDITABLE_ARG = "CARGO_AUDITABLE_VERSION"
AUDIT_SECTION = ".dep-v0"
OCI_LABELS = {  # label -> the build ARG that must feed it
    "org.opencontainers.image.source": "SOURCE",
    "org.opencontainers.image.version": "VERSION",
    "org.opencontainers.image.revision": "REVISION",
}
# Bases without a shell or package manager (a `:debug` distroless tag has a shell).
SHELL_LESS_BASE = re.compile(r"^(scratch|gcr\.io/distroless/[a-z0-9-]+(:[A-Za-z0-9._-]+)?(@sha256:[a-f0-9]{64})?)$")


@dataclass
class Stage:
    """One FROM and the instructions under it."""

    image: str
    alias: str | None
    commands: list[Any] = field(default_factory=list)

    def of(self, cmd: str) -> list[Any]:
        return [c for c in self.commands if c.cmd == cmd]


@dataclass
class Parsed:
    """The Dockerfile as buildkit parses it."""

    global_args: dict[str, str | None]
    stages: list[Stage]


def parse() -> Parsed:
    import dockerfile  # buildkit's parser; imported here so a missing package fails one check

    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        if command.cmd == "FROM":
            words = list(command.value)
            alias = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(image=words[0], alias=alias))
        elif not stages:
            if command.cmd == "ARG":
                global_args.update(arg_defaults(command))
        else:
            stages[-1].commands.append(command)
    return Parsed(global_args, stages)


def arg_defaults(command: Any) -> dict[str, str | None]:
    """NAME -> default (None when declared without one) of an ARG instruction."""
    out: dict[str, str | None] = {}
    for word in command.value:
        name, eq, default = word.partition("=")
        out[name] = default if eq else None
    return out


def workspace() -> dict[str, Any]:
    with (REPO / "Cargo.toml").open("rb") as f:
        return tomllib.load(f)


def workspace_binaries() -> dict[str, str]:
    """Binary name -> package name of every binary of the workspace members under bins/."""
    out: dict[str, str] = {}
    for member in workspace()["workspace"]["members"]:
        if not member.startswith("bins/"):
            continue
        with (REPO / member / "Cargo.toml").open("rb") as f:
            manifest = tomllib.load(f)
        package = manifest["package"]["name"]
        bins = [b["name"] for b in manifest.get("bin", [])]
        if not bins and (REPO / member / "src" / "main.rs").exists():
            bins = [package]
        for name in bins:
            out[name] = package
    return out


def top_level_lines(script: Path) -> list[str]:
    """The lines of a shell script that run unconditionally: not indented, not comments."""
    return [ln for ln in script.read_text(encoding="utf-8").splitlines() if ln and not ln[0].isspace() and ln[0] != "#"]


def build_segments(stage: Stage) -> tuple[Any, list[str]]:
    """The build stage's RUN that calls `cargo auditable build`, and its `&&`-separated commands."""
    runs = [c for c in stage.of("RUN") if BUILD in " ".join(c.value)]
    assert len(runs) == 1, f"expected one RUN with {BUILD} in stage {stage.alias}, found {len(runs)}"
    run = runs[0]
    assert not run.json, "the build RUN must be shell form (its cargo line is compared with scripts/test)"
    return run, [part.strip() for part in " ".join(run.value).split("&&")]


def elf_section(path: Path, wanted: str) -> bytes | None:
    """The bytes of one section of a 64-bit little-endian ELF file, or None without it."""
    import struct

    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path} is not a 64-bit little-endian ELF file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, offset, size

    _, names_at, _ = header(shstrndx)
    for i in range(shnum):
        name, offset, size = header(i)
        end = data.index(b"\0", names_at + name)
        if data[names_at + name : end].decode() == wanted:
            return data[offset : offset + size]
    return None


def audit_list(path: Path) -> dict[str, Any]:
    """The dependency list cargo-auditable embedded in a binary (its .dep-v0 section)."""
    import json
    import zlib

    section = elf_section(path, AUDIT_SECTION)
    assert section is not None, f"{path} has no {AUDIT_SECTION} section: not built with {BUILD}"
    return json.loads(zlib.decompress(section))


def ignore_matcher(patterns: list[str]) -> Callable[[str], bool]:
    """Whether .dockerignore leaves a path (relative, with /) out of the build context.

    Follows Docker's rules as far as this repository needs: `*` and `?` within a
    path element, `**` across elements, a pattern excludes what is under a matched
    folder too, a leading `!` re-includes, and the last matching pattern wins.
    """
    compiled: list[tuple[bool, re.Pattern[str]]] = []
    for raw in patterns:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        line = line.lstrip("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(line):
            if line.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif line.startswith("**", i):
                regex += ".*"
                i += 2
            elif line[i] == "*":
                regex += "[^/]*"
                i += 1
            elif line[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(line[i])
                i += 1
        compiled.append((include, re.compile(f"^{regex}(?:/.*)?$")))

    def excluded(path: str) -> bool:
        verdict = False
        for include, pattern in compiled:
            if pattern.match(path):
                verdict = not include
        return verdict

    return excluded


def checks(run: Any, defaults: Callable[[], Any], skip: type[Exception]) -> None:
    """Registers the image checks with the chart check's runner.

    `defaults()` is the chart rendered with its default values; `skip` is the
    runner's Skip exception.
    """
    cache: dict[str, Parsed] = {}

    def parsed() -> Parsed:
        if "p" not in cache:
            cache["p"] = parse()
        return cache["p"]

    def stages() -> tuple[Stage, Stage]:
        p = parsed()
        final = p.stages[-1]
        froms = [c for c in final.of("COPY") if any(f.startswith("--from=") for f in c.flags)]
        sources = {f.split("=", 1)[1] for c in froms for f in c.flags if f.startswith("--from=")}
        assert len(sources) == 1, f"the final stage copies from {sorted(sources) or 'no stage'}; expected one build stage"
        (source,) = sources
        builds = [s for s in p.stages[:-1] if s.alias == source]
        assert builds, f"COPY --from={source} names no earlier stage"
        return builds[0], final

    def shape() -> str:
        p = parsed()
        assert len(p.stages) >= 2, f"{len(p.stages)} stage(s): expected a build stage and a final one"
        final = p.stages[-1]
        assert SHELL_LESS_BASE.match(final.image) and ":debug" not in final.image, (
            f"final base {final.image} is not a shell-less one (distroless without :debug, or scratch)"
        )
        assert not final.of("RUN"), "the final stage has a RUN, which needs a shell the base must not have"
        assert not final.of("ENTRYPOINT") and not final.of("CMD"), "the chart gives each container its command"
        return f"{len(p.stages)} stages; final base {final.image}"

    run.check("image: the Dockerfile parses (buildkit) into a build stage and a shell-less final stage", shape)

    def toolchain() -> str:
        build, _ = stages()
        match = re.fullmatch(r"(?:docker\.io/)?(?:library/)?rust:(\d+\.\d+\.\d+)(-[a-z0-9-]+)?(@sha256:[a-f0-9]{64})?", build.image)
        assert match, f"build image {build.image} is not the official rust image pinned to x.y.z"
        pinned = match.group(1)
        rustc = shutil.which("rustc")
        if not rustc:
            raise skip("rustc is not on PATH: cannot compare the build image with the toolchain")
        out = subprocess.run([rustc, "--version"], capture_output=True, text=True, check=True).stdout
        local = re.match(r"rustc (\d+\.\d+\.\d+)", out)
        assert local, f"cannot read {out!r}"
        assert pinned == local.group(1), (
            f"the image builds with Rust {pinned}, CI with {local.group(1)}: pin the build stage to rust:{local.group(1)}-..."
        )
        floor = workspace()["workspace"]["package"].get("rust-version", "0")
        as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
        assert as_tuple(pinned) >= as_tuple(floor), f"Rust {pinned} is below the workspace's rust-version {floor}"
        return f"rust {pinned} = rustc on PATH"

    run.check("image: the build stage is the official Rust image of the toolchain CI builds with", toolchain)

    def binaries() -> str:
        build, final = stages()
        chart = [c["command"] for c in defaults().deployment()["spec"]["template"]["spec"]["containers"]]
        assert all(len(cmd) == 1 for cmd in chart), f"chart commands {chart}"
        chart_names = sorted(cmd[0] for cmd in chart)
        workspace_names = sorted(workspace_binaries())
        assert chart_names == workspace_names, f"chart commands {chart_names} != workspace binaries {workspace_names}"
        copies = [c for c in final.of("COPY") if any(f.startswith("--from=") for f in c.flags)]
        assert len(copies) == 1, f"{len(copies)} COPY --from instructions; expected one for the binaries"
        *sources, dest = copies[0].value
        assert dest == BIN_DIR, f"binaries go to {dest}, expected {BIN_DIR}"
        copied = sorted(Path(s).name for s in sources)
        assert copied == workspace_names, f"copies {copied}, expected exactly {workspace_names}"
        # ...and the build stage puts exactly those, from cargo's release folder, where COPY takes them.
        _, segments = build_segments(build)
        staged = sorted(Path(w).name for seg in segments for w in seg.split() if w.startswith("target/release/"))
        assert staged == workspace_names, f"the build stage stages {staged}, expected {workspace_names}"
        folders = {str(Path(s).parent) for s in sources}
        assert any(seg.startswith("cp ") and seg.split()[-1].rstrip("/") in folders for seg in segments), (
            f"the build stage does not copy the binaries into {sorted(folders)}"
        )
        return ", ".join(copied) + f" -> {BIN_DIR}"

    run.check("image: copies exactly the workspace's binaries, under the chart's command names, to /usr/local/bin", binaries)

    def user() -> str:
        _, final = stages()
        users = final.of("USER")
        assert users, "the final stage sets no USER"
        value = users[-1].value[0]
        uid, _, gid = value.partition(":")
        pod = defaults().deployment()["spec"]["template"]["spec"].get("securityContext") or {}
        assert uid.isdigit() and int(uid) != 0, f"USER {value}: expected a numeric non-root uid"
        assert int(uid) == pod.get("runAsUser"), f"USER {value} but the chart's runAsUser is {pod.get('runAsUser')}"
        if "runAsGroup" in pod:
            assert gid and gid.isdigit() and int(gid) == pod["runAsGroup"], (
                f"USER {value} but the chart's runAsGroup is {pod['runAsGroup']}"
            )
        return f"USER {value} = chart runAsUser/runAsGroup"

    run.check("image: its USER is the chart's runAsUser (and runAsGroup)", user)

    def build_command() -> str:
        build, _ = stages()
        _, segments = build_segments(build)
        cargo = [s for s in segments if s.startswith(BUILD)]
        assert len(cargo) == 1, f"expected one {BUILD} command, found {cargo}"
        command = cargo[0]
        words = command.split()
        for flag in ("--release", "--locked"):
            assert flag in words, f"{command!r} lacks {flag}"
        packages = sorted(words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-p", "--package"))
        wanted = sorted(set(workspace_binaries().values()))
        assert packages == wanted, f"builds packages {packages}, expected {wanted}"
        lines = top_level_lines(TEST_SCRIPT)
        assert command in lines, (
            f"scripts/test never runs {command!r} as a top-level line: the image's build command must be one CI runs"
        )
        return command

    run.check("image: its cargo build command (--release --locked) is a line scripts/test runs, byte for byte", build_command)

    def auditable_install() -> str:
        build, _ = stages()
        run_line = build_segments(build)[0].start_line
        declared: dict[str, str | None] = {}
        for arg in build.of("ARG"):
            if arg.start_line < run_line:
                declared.update(arg_defaults(arg))
        version = declared.get(AUDITABLE_ARG)
        assert version and re.fullmatch(r"\d+\.\d+\.\d+", version), (
            f"the build stage declares no ARG {AUDITABLE_ARG}=x.y.z before the build (scripts/test reads it)"
        )
        installs = [
            " ".join(c.value) for c in build.of("RUN") if c.start_line < run_line and "cargo install" in " ".join(c.value)
        ]
        wanted = f"--version ${{{AUDITABLE_ARG}}} cargo-auditable"
        assert any("--locked" in i.split() and wanted in i for i in installs), (
            f"no RUN before the build installs cargo-auditable with --locked {wanted}: {installs}"
        )
        return f"cargo-auditable {version}, --locked"

    run.check("image: cargo-auditable is installed at the pinned version before the build", auditable_install)

    def embedded_dependencies() -> str:
        lock = {(p["name"], p["version"]) for p in tomllib.loads((REPO / "Cargo.lock").read_text())["package"]}
        target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release"
        found = []
        for name, package in sorted(workspace_binaries().items()):
            path = target / name
            if not path.is_file():
                raise skip(f"{path} is not built (scripts/test builds it with {BUILD} before this check)")
            listed = audit_list(path)
            packages = listed["packages"]
            roots = [p["name"] for p in packages if p.get("root")]
            assert roots == [package], f"{name}: the embedded list's root is {roots}, expected [{package!r}]"
            unknown = [f"{p['name']} {p['version']}" for p in packages if (p["name"], p["version"]) not in lock]
            assert not unknown, f"{name}: embedded packages not in Cargo.lock: {unknown[:5]}"
            names = {p["name"] for p in packages}
            for needed in ("tokio", "kube-client", "reqwest"):
                assert needed in names, f"{name}: {needed} is not in its embedded dependency list"
            found.append(f"{name} {len(packages)}")
        return "packages listed: " + ", ".join(found)

    run.check(
        "image: each release binary embeds its dependency list (cargo-auditable), every entry as Cargo.lock has it",
        embedded_dependencies,
    )

    def labels() -> str:
        p = parsed()
        build, final = stages()
        pairs: dict[str, str] = {}
        for label in final.of("LABEL"):
            words = list(label.value)
            pairs.update({words[i]: words[i + 1].strip('"') for i in range(0, len(words) - 1, 2)})
        declared: dict[str, str | None] = {}
        for arg in final.of("ARG"):
            declared.update(arg_defaults(arg))
        for key, arg in OCI_LABELS.items():
            assert key in pairs, f"no {key} label"
            assert pairs[key] in (f"${arg}", f"${{{arg}}}"), f"{key}={pairs[key]}, expected the ${arg} build ARG"
            assert arg in declared, f"ARG {arg} is not declared in the final stage (the label would be empty)"
            assert arg in p.global_args, f"ARG {arg} has no global declaration with its default"
        version = workspace()["workspace"]["package"]["version"]
        assert p.global_args.get("VERSION") == version, (
            f"ARG VERSION defaults to {p.global_args.get('VERSION')!r}, the workspace version is {version!r}"
        )
        return ", ".join(f"{k.rsplit('.', 1)[1]}=${a}" for k, a in OCI_LABELS.items()) + f"; VERSION default {version}"

    run.check("image: OCI labels source, version, revision from build ARGs; VERSION defaults to the workspace's", labels)

    def revision() -> str:
        build, _ = stages()
        source = REVISION_SOURCE.read_text(encoding="utf-8")
        found = re.search(r'pub const INPUT: &str = "([A-Z_]+)";', source)
        assert found, f"no INPUT variable in {REVISION_SOURCE.relative_to(REPO)}"
        variable = found.group(1)
        run_line = build_segments(build)[0].start_line
        args = {name for a in build.commands if a.cmd == "ARG" and a.start_line < run_line for name in arg_defaults(a)}
        assert "REVISION" in args, "ARG REVISION is not declared in the build stage before the build"
        envs = [c for c in build.of("ENV") if c.start_line < run_line]
        values = {c.value[i]: c.value[i + 1] for c in envs for i in range(0, len(c.value) - 1, 2)}
        assert values.get(variable) in ("$REVISION", "${REVISION}"), (
            f"the build stage does not set {variable}=$REVISION before the build; the binaries would say 'unknown'"
        )
        return f"{variable}=${{REVISION}} before cargo build"

    run.check("image: the REVISION build ARG reaches the binaries' build scripts", revision)

    def context() -> str:
        excluded = ignore_matcher(DOCKERIGNORE.read_text(encoding="utf-8").splitlines())
        for path in (".git/HEAD", "target/release/tcab-admitter", ".venv-chart/bin/python"):
            assert excluded(path), f".dockerignore keeps {path} in the build context"
        needed = ["Cargo.toml", "Cargo.lock"]
        for member in workspace()["workspace"]["members"]:
            for folder, dirs, files in os.walk(REPO / member):
                dirs[:] = [d for d in dirs if d != "target"]
                needed += [str((Path(folder) / f).relative_to(REPO)) for f in files]
        needed.append(str(REVISION_SOURCE.relative_to(REPO)))
        dropped = [p for p in needed if excluded(p) and not p.endswith(".md")]
        assert not dropped, f".dockerignore leaves out files the build needs: {dropped[:5]}"
        return f"{len(needed)} workspace files kept; .git and target left out"

    run.check(".dockerignore: keeps every workspace file the build reads, leaves out .git and target", context)
