//! Bakes the git revision into the binary as `TCAB_REVISION` (see ../revision.rs).

#[path = "../revision.rs"]
mod revision;

fn main() {
    revision::emit();
}
