# syntax=docker/dockerfile:1
#
# The dispatcher image: the three binaries (tcab-admitter, tcab-lease-keeper,
# tcab-reaper) on a shell-less, non-root base. The chart runs each container
# with `command: [<binary>]`. Build and push (README.md, "The image"):
#
#   docker build \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://example.invalid/tcab-dispatcher \
#     -t registry.example/tcab-dispatcher:"$(git rev-parse --short=12 HEAD)" .
#
# No container engine runs in CI, so charts/check_image.py checks this file with
# buildkit's own parser: the binaries it copies are the workspace's and the
# chart's, its USER is the chart's runAsUser, its build image is the toolchain CI
# builds with, and its cargo build command is one scripts/test runs, byte for byte, with the
# same cargo-auditable version.

# OCI labels. VERSION is the workspace version (Cargo.toml); REVISION also reaches
# the binaries (--version, first log line), since the build context has no .git.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=

FROM rust:1.95.0-slim-bookworm AS build
WORKDIR /src
COPY . .
ARG REVISION
# Read by the binaries' build scripts (bins/revision.rs).
ENV TCAB_GIT_REVISION=${REVISION}
# cargo-auditable embeds the binaries' dependency list (crate names, versions and
# sources from Cargo.lock) in a section of each binary, for scanners such as
# `cargo audit bin` and trivy; the version is the one scripts/test installs.
ARG CARGO_AUDITABLE_VERSION=0.7.7
RUN --mount=type=cache,id=tcab-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    cargo install --locked --version ${CARGO_AUDITABLE_VERSION} cargo-auditable
# The cache mounts keep downloaded crates and compiled dependencies between builds;
# the binaries are copied out of the cached target folder in the same step.
RUN --mount=type=cache,id=tcab-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=tcab-target-release,target=/src/target,sharing=locked \
    cargo auditable build --release --locked --bins -p tcab-admitter -p tcab-lease-keeper -p tcab-reaper \
    && mkdir -p /out \
    && cp target/release/tcab-admitter target/release/tcab-lease-keeper target/release/tcab-reaper /out/

# Debian 12 like the build image (same glibc), with libgcc and CA certificates, no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="tcab-dispatcher" \
      org.opencontainers.image.description="Turns the tcab backend's run and publish queues into Kubernetes Jobs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/tcab-admitter /out/tcab-lease-keeper /out/tcab-reaper /usr/local/bin/
# The chart's runAsUser and runAsGroup (the base's "nonroot" user).
USER 65532:65532
