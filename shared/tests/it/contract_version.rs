//! docs/backend-contract.md states the version of the contract it writes
//! down, and it is the one the binaries say they speak
//! (`tcab_shared::backend::CONTRACT_VERSION`): a change to one without the
//! other fails here.

use std::path::Path;
use tcab_shared::backend::CONTRACT_VERSION;

#[test]
fn the_contract_page_states_the_version_the_dispatcher_speaks() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/backend-contract.md");
    let text = std::fs::read_to_string(&path).expect("docs/backend-contract.md");
    let stated: Vec<&str> = text
        .split("**contract ")
        .skip(1)
        .filter_map(|rest| rest.split_once("**").map(|(version, _)| version))
        .collect();
    assert_eq!(
        stated,
        [CONTRACT_VERSION],
        "docs/backend-contract.md must state its version once, as **contract N**"
    );
    assert!(
        CONTRACT_VERSION.parse::<u32>().is_ok_and(|v| v >= 1),
        "a whole number from 1: {CONTRACT_VERSION:?}"
    );
}
