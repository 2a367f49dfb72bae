//! tcab-admitter library (being written)
