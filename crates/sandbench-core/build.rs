//! A token for this build of the engine (`SANDBENCH_BUILD`): a hash of its
//! sources, the lock file, the toolchain and the flags. The process tier
//! starts its sandbox helper from a small binary of its own when that
//! binary carries the same token; `cargo run` rebuilds only the main
//! binary, and a helper left from an older build must never build a sandbox
//! (its isolation code may be the one a fix replaced).

use std::hash::Hasher;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(&p, out),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
}

fn main() {
    let mut files = vec![];
    walk(Path::new("src"), &mut files);
    files.sort();
    // Fixed keys (`DefaultHasher::new`): the same bytes give the same token
    // within one toolchain, which is all a token must do (both binaries link
    // this crate as built once).
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in &files {
        h.write(f.to_string_lossy().as_bytes());
        h.write(&std::fs::read(f).unwrap_or_default());
    }
    h.write(&std::fs::read("../../Cargo.lock").unwrap_or_default());
    for var in ["PROFILE", "TARGET", "CARGO_ENCODED_RUSTFLAGS", "CARGO_PKG_VERSION"] {
        h.write(std::env::var(var).unwrap_or_default().as_bytes());
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Ok(out) = std::process::Command::new(rustc).arg("-vV").output() {
        h.write(&out.stdout);
    }
    println!("cargo:rustc-env=SANDBENCH_BUILD={:016x}", h.finish());
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
}
