//! Integration tests of the fault proxy (one test binary): in front of
//! kube-sim (fast, always), and in front of the real kube-apiserver when
//! `scripts/control-plane build` has made it.

mod cli;
mod cluster;
mod common;
mod real;
mod sim;
