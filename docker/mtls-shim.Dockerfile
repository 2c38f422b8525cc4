# syntax=docker/dockerfile:1
# The `mtls-shim` binary (package `mtls-shim`) on distroless, as a non-root user.
#   docker build -f docker/mtls-shim.Dockerfile -t ghcr.io/linkerd-rs/mtls-shim:latest .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and the build between runs; the binary is copied out of
# the cached target directory. The image's binary has no symbols or debug info.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked -p mtls-shim --bin mtls-shim \
    && install -D target/release/mtls-shim /out/mtls-shim

# glibc of Debian 12, as in the build stage; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/mtls-shim /mtls-shim
USER 65532:65532
ENTRYPOINT ["/mtls-shim"]
