//! Compiles the vault proto with protox (pure Rust), so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/vault.proto");
    let descriptors = protox::compile(["proto/vault.proto"], ["proto"])?;
    // Messages that carry a per-job token get a hand-written, redacting Debug
    // (proto/src/lib.rs), so no `?request` in a log line can print a token.
    tonic_prost_build::configure()
        .skip_debug(["tcab.vault.v1.PutRequest"])
        .compile_fds(descriptors)?;
    Ok(())
}
