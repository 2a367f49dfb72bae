//! `tcab-workload driver | publisher | plain`: the rig's fake programs as
//! a real container's process (see `tcab_workloads::container`). A wrong
//! command line is a message on stderr and exit status 2; otherwise the exit
//! status is the program's.

use tcab_workloads::container;

fn main() {
    let which = match container::parse_args(std::env::args().skip(1)) {
        Ok(which) => which,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("starting the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(container::main(which));
    std::process::exit(code);
}
