//! (being written)
/// The backend client.
pub struct BackendClient;
