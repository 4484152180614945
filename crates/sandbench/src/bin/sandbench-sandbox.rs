//! `sandbench-sandbox`: the process tier's sandbox helper and nothing else.
//! Exec'd for every sandbox, it is a twentieth of sandbench's size, so it
//! starts in about half the time; sandbench uses it only when it answers
//! `__build` with sandbench's own build token (`tier::process::helper_exe`).
use std::io::Write;

fn main() {
    let arg = std::env::args_os().nth(1);
    if arg.as_deref().is_some_and(|a| a == "__sandbox") {
        sandbench::tier::process_helper_main();
    }
    if arg.as_deref().is_some_and(|a| a == "__build") {
        let _ = writeln!(std::io::stdout(), "{}", sandbench::tier::PROCESS_HELPER_BUILD);
        return;
    }
    eprintln!("sandbench-sandbox: the process tier starts this helper itself; run `sandbench` instead");
    std::process::exit(2);
}
