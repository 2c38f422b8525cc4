//! Generates the introspection API's messages, client and server from `proto/` with the
//! `protoc` that `protoc-bin-vendored` ships (no system protoc, no network).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(
            config,
            &["../../proto/introspection.proto"],
            &["../../proto"],
        )?;
    Ok(())
}
