//! tcab-shared's integration tests, as one test binary (one link, one
//! process list): `cargo nextest run -p tcab-shared`.

mod backend_client;
mod config;
mod contract_version;
mod events;
mod kube_client;
mod metrics_docs;
mod settings_docs;
