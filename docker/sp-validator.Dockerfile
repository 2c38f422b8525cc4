# syntax=docker/dockerfile:1
# The `sp-validator` binary (package `sp-validator`) on distroless, as a non-root user.
#   docker build -f docker/sp-validator.Dockerfile -t ghcr.io/linkerd-rs/sp-validator:latest .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and the build between runs; the binary is copied out of
# the cached target directory. The image's binary has no symbols or debug info.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked -p sp-validator --bin sp-validator \
    && install -D target/release/sp-validator /out/sp-validator

# glibc of Debian 12, as in the build stage; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/sp-validator /sp-validator
USER 65532:65532
ENTRYPOINT ["/sp-validator"]
