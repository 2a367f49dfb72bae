//! tcab-reaper library (being written)
