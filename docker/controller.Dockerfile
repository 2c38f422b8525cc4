# syntax=docker/dockerfile:1
# The drop-in image: it replaces upstream's controller image in the containers `destination`,
# `sp-validator` and `policy` of an installed Linkerd's `linkerd-destination` Deployment (see
# deploy/README.md, "Drop-in"). Its layout is upstream's: the entrypoint `/controller` runs the
# subcommands `destination` and `sp-validator` (by running `/destination` or `/sp-validator`),
# and the chart's `policy` container runs `/linkerd-policy-controller`.
#   docker build -f docker/controller.Dockerfile -t ghcr.io/linkerd-rs/controller:latest .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and the build between runs; the binaries are copied out of
# the cached target directory. The image's binaries have no symbols or debug info.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked \
        -p controller --bin controller \
        -p destination --bin destination \
        -p sp-validator --bin sp-validator \
        -p policy --bin policy-controller \
    && install -D target/release/controller /out/controller \
    && install -D target/release/destination /out/destination \
    && install -D target/release/sp-validator /out/sp-validator \
    && install -D target/release/policy-controller /out/linkerd-policy-controller

# glibc of Debian 12, as in the build stage; no shell, no package manager. The chart runs the
# containers as UID 2103, which needs nothing from the image.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /
USER 65532:65532
ENTRYPOINT ["/controller"]
