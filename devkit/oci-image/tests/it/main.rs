//! tcab-oci-image's integration tests: the archive read back, the dispatcher
//! image held to the Dockerfile, the base on real binaries, the command line.

mod archive;
mod base;
mod cli;
mod dockerfile;
mod support;
