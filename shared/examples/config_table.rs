//! Prints the README's configuration table from the config source:
//! `cargo run -q -p tcab-shared --example config_table`.

fn main() {
    print!("{}", tcab_shared::config::markdown_table());
}
