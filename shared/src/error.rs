//! How an error is written on one line, everywhere: the error's own message,
//! then each source's, joined by `": "`.
//!
//! Errors in this workspace follow the thiserror convention that a message
//! does not repeat its source, so a log line that shows only `{error}` loses
//! the cause (a refused connection, the API server's words). Log and report
//! them with [`error_chain`].

use std::error::Error;

/// An error and its sources on one line (`a: b: c`). A source whose message
/// the line already ends with (an error that repeats its source) is not
/// written twice.
pub fn error_chain(error: &dyn Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    /// An error with a message and an optional source.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn every_source_is_written_once_in_order() {
        let inner = Layer("connection refused", None);
        let middle = Layer("could not reach the backend", Some(Box::new(inner)));
        let outer = Layer("claim failed", Some(Box::new(middle)));
        assert_eq!(
            error_chain(&outer),
            "claim failed: could not reach the backend: connection refused"
        );
        assert_eq!(error_chain(&Layer("alone", None)), "alone");
        // A message that already ends with its source's is not repeated.
        let repeats = Layer(
            "timed out: deadline",
            Some(Box::new(Layer("deadline", None))),
        );
        assert_eq!(error_chain(&repeats), "timed out: deadline");
    }
}
