//! A log sink: what a `tracing_subscriber` writes, kept for the test to read.

use std::sync::{Arc, Mutex};

/// Collects formatted log lines (use with `.with_writer(move || logs.clone())`).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    #[test]
    fn what_is_written_reads_back() {
        let logs = super::Logs::default();
        let mut writer = logs.clone();
        writer.write_all(b"one\ntwo\n").unwrap();
        assert_eq!(logs.text(), "one\ntwo\n");
    }
}
