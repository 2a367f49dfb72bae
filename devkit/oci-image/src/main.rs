//! `tcab-oci-image`: writes the dispatcher image or a workload image as an OCI
//! archive for `ctr -n k8s.io images import`, and prints its manifest digest
//! and reference.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Builds OCI image archives for `ctr images import`, without a container engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The Dockerfile's runtime stage from three built binaries.
    Dispatcher {
        /// The directory holding tcab-admitter, tcab-lease-keeper and tcab-reaper.
        #[arg(long)]
        bin_dir: PathBuf,
        /// The image's tag (the name is tcab-dispatcher).
        #[arg(long)]
        tag: String,
        /// The version label (the Dockerfile's VERSION).
        #[arg(long, default_value = "0.1.0")]
        version: String,
        /// The revision label (the Dockerfile's REVISION).
        #[arg(long, default_value = "unknown")]
        revision: String,
        /// The archive to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// A test rig workload image.
    Workload {
        /// The image's reference, e.g. tcab/driver:dev.
        #[arg(long)]
        name: String,
        /// The workload binary.
        #[arg(long)]
        bin: PathBuf,
        /// The archive to write.
        #[arg(long)]
        out: PathBuf,
        /// The program's arguments, after `--`.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

fn main() -> anyhow::Result<()> {
    let (image, out) = match Cli::parse().command {
        Command::Dispatcher {
            bin_dir,
            tag,
            version,
            revision,
            out,
        } => (
            tcab_oci_image::dispatcher_image(&bin_dir, &tag, &version, &revision)?,
            out,
        ),
        Command::Workload {
            name,
            bin,
            out,
            args,
        } => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            (tcab_oci_image::workload_image(&name, &bin, &args)?, out)
        }
    };
    let digest = image.write_archive(&out)?;
    println!("{digest} {}", image.reference());
    Ok(())
}
