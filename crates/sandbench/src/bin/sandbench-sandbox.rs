//! `sandbench-sandbox`: the process tier's sandbox helper and nothing else.
//! Exec'd for every sandbox, it is a twentieth of sandbench's size, so it
//! starts in about half the time; sandbench uses it only when it answers
//! `__build` with sandbench's own build token (`tier::process::helper_exe`).
//!
//! It has no Rust `main`: std's start-up would read `/proc/self/maps` (to
//! place a guard below the main thread's stack), check fds 0–2 with `poll`
//! and install stack-overflow handlers, about a third of the helper's time
//! before its first step. The helper makes no deep recursion and std's
//! `args` still works (glibc hands argv to std's init hook), so the C entry
//! point is enough; SIGPIPE is ignored here as std would have.
#![cfg_attr(not(test), no_main)]
#![allow(unsafe_code)] // the C entry point (`no_mangle`) and a `signal` call

#[cfg(not(test))]
use std::io::Write;

#[cfg(not(test))] // the test harness brings its own `main`
#[unsafe(no_mangle)]
extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: installs SIG_IGN, no handler code runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let arg = std::env::args_os().nth(1);
    if arg.as_deref().is_some_and(|a| a == "__sandbox") {
        sandbench::tier::process_helper_main();
    }
    if arg.as_deref().is_some_and(|a| a == "__zygote") {
        sandbench::tier::process_zygote_main();
    }
    if arg.as_deref().is_some_and(|a| a == "__build") {
        let _ = writeln!(std::io::stdout(), "{}", sandbench::tier::PROCESS_HELPER_BUILD);
        return 0;
    }
    eprintln!("sandbench-sandbox: the process tier starts this helper itself; run `sandbench` instead");
    2
}
