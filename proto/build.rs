//! Compiles the vault proto with protox (pure Rust), so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/vault.proto");
    let descriptors = protox::compile(["proto/vault.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
