//! tcab-lease-keeper library (being written)
