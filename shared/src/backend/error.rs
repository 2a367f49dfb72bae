//! (being written)
/// A backend call that failed.
#[derive(Debug)]
pub struct BackendError;
