//! Which of the data libraries agents import (numpy, pandas, matplotlib) a
//! tier's Python has, for `doctor`: one shell line each tier's probe runs in
//! a real sandbox (numpy imported: its files can be there while its BLAS
//! is not; the others found, with their version), and its answer read back bounded and inert
//! (the answer comes from inside the sandbox).

use crate::tier::contract::Check;

/// The libraries `doctor` asks about, in the order it names them.
pub(crate) const LIBRARIES: &[&str] = &["numpy", "pandas", "matplotlib"];

/// Most answer lines read (one per library is expected).
const MAX_LINES: usize = 64;

/// A shell line: `python3` prints `lib NAME VERSION` for each of
/// [`LIBRARIES`] it has, or `lib NAME none ERROR`. numpy is imported (its
/// files can be there while the BLAS it loads is not: the process tier's
/// missing `/etc/alternatives`); the others are found and their version read
/// from their metadata, not imported — importing pandas and matplotlib takes
/// most of a second of CPU (seconds under gVisor), and this runs at every
/// probe of a tier, not only in `doctor`. It always exits 0 (a missing
/// library is an answer, not a failed probe).
pub(crate) fn probe_sh() -> String {
    let names: Vec<String> = LIBRARIES.iter().map(|l| format!("\"{l}\"")).collect();
    format!(
        "python3 -I -c 'import importlib, importlib.util, importlib.metadata\nfor m in ({},):\n    try:\n        \
         if m == \"numpy\":\n            v = importlib.import_module(m).__version__\n        \
         elif importlib.util.find_spec(m) is None:\n            raise ModuleNotFoundError(m)\n        \
         else:\n            v = importlib.metadata.version(m)\n        \
         print(\"lib\", m, v)\n    except BaseException as e:\n        print(\"lib\", m, \"none\", type(e).__name__)\n' \
         2>/dev/null || true\n",
        names.join(", ")
    )
}

/// One library's answer: its version, or the error its import raised.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    Imports(String),
    Fails(String),
}

/// The answers in the probe's output, one per library at most (the first
/// line naming it). Anything not shaped like an answer is ignored; versions
/// and error names are kept only when made of plain characters.
pub(crate) fn parse(stdout: &str) -> Vec<(&'static str, Answer)> {
    let plain = |w: &str, extra: &[char]| {
        !w.is_empty() && w.len() <= 40 && w.chars().all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    };
    let mut out: Vec<(&'static str, Answer)> = vec![];
    let mut seen: Vec<&str> = vec![];
    for line in stdout.lines().take(MAX_LINES) {
        let mut words = line.split_whitespace();
        if words.next() != Some("lib") {
            continue;
        }
        let Some(name) = words.next().and_then(|n| LIBRARIES.iter().find(|l| **l == n)) else { continue };
        if seen.contains(name) {
            continue;
        }
        seen.push(name);
        let answer = match (words.next(), words.next()) {
            (Some("none"), err) => Answer::Fails(err.filter(|e| plain(e, &['_'])).unwrap_or("an error").to_string()),
            (Some(v), None) if v.starts_with(|c: char| c.is_ascii_digit()) && plain(v, &['.', '+', '-', '_']) => {
                Answer::Imports(v.to_string())
            }
            _ => continue,
        };
        out.push((name, answer));
    }
    out
}

/// `doctor`'s check: ok when every library imports, a warning naming the
/// ones that do not (programs that import them fail there), and `fix` the
/// way to get them on this tier.
pub(crate) fn check(stdout: &str, where_: &str, fix: &str) -> Check {
    let answers = parse(stdout);
    let version = |l: &str| {
        answers.iter().find(|(n, _)| *n == l).and_then(|(_, a)| match a {
            Answer::Imports(v) => Some(v.clone()),
            Answer::Fails(_) => None,
        })
    };
    let have: Vec<String> = LIBRARIES.iter().filter_map(|l| version(l).map(|v| format!("{l} {v}"))).collect();
    let lack: Vec<String> = LIBRARIES
        .iter()
        .filter(|l| version(l).is_none())
        .map(|l| match answers.iter().find(|(n, _)| n == l) {
            Some((_, Answer::Fails(e))) => format!("{l} ({e})"),
            _ => format!("{l} (no answer)"),
        })
        .collect();
    if lack.is_empty() {
        Check::ok("libraries", format!("{} import {where_}", have.join(", ")))
    } else {
        let verb = if have.len() == 1 { "imports" } else { "import" };
        let have = if have.is_empty() { String::new() } else { format!("; {} {verb}", have.join(", ")) };
        Check::warn(
            "libraries",
            format!("{} do not import {where_}: programs that use them fail{have}", lack.join(", ")),
            fix,
        )
    }
}

/// The same check from the Debian packages a root tree holds (the microVM
/// guest's, which `doctor` does not boot): `versions` maps package to
/// version.
pub(crate) fn check_packages(versions: &[(&str, Option<String>)], where_: &str, fix: &str) -> Check {
    let out: String = LIBRARIES
        .iter()
        .map(|l| {
            let pkg = format!("python3-{l}");
            match versions.iter().find(|(p, _)| *p == pkg).and_then(|(_, v)| v.as_deref()) {
                // Debian's version ("1:1.24.2-1+deb12u1"): the upstream part.
                Some(v) => {
                    let v = v.split_once(':').map_or(v, |(_, r)| r);
                    format!("lib {l} {}\n", v.split('-').next().unwrap_or(v))
                }
                None => format!("lib {l} none NotInstalled\n"),
            }
        })
        .collect();
    check(&out, where_, fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::contract::CheckLevel;

    #[test]
    fn the_probe_line_asks_for_every_library_and_always_succeeds() {
        let sh = probe_sh();
        for l in LIBRARIES {
            assert!(sh.contains(&format!("\"{l}\"")), "{sh}");
        }
        assert!(sh.trim_end().ends_with("|| true"), "{sh}");
        let out = std::process::Command::new("/bin/sh").arg("-c").arg(&sh).output().unwrap();
        assert!(out.status.success());
        // Whatever this host has, every library gets an answer.
        assert_eq!(parse(&String::from_utf8_lossy(&out.stdout)).len(), LIBRARIES.len(), "{:?}", out);
        // With Debian's python3 and its data libraries (as CI installs them),
        // each is found with its version.
        let debian = std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import numpy, pandas, matplotlib"])
            .output()
            .is_ok_and(|o| o.status.success());
        if debian {
            let out =
                std::process::Command::new("/bin/sh").arg("-c").arg(&sh).env("PATH", "/usr/bin:/bin").output().unwrap();
            let answers = parse(&String::from_utf8_lossy(&out.stdout));
            assert!(answers.iter().all(|(_, a)| matches!(a, Answer::Imports(_))), "{answers:?}");
        }
    }

    #[test]
    fn answers_are_read_bounded_and_inert() {
        let c = check("lib numpy 1.24.2\nlib pandas 1.5.3\nlib matplotlib 3.6.3\n", "in the image", "fix");
        assert_eq!(c.level, CheckLevel::Ok);
        assert_eq!(c.detail, "numpy 1.24.2, pandas 1.5.3, matplotlib 3.6.3 import in the image");
        let c = check("lib numpy 1.24.2\nlib pandas none ModuleNotFoundError\n", "here", "apt-get it");
        assert_eq!(c.level, CheckLevel::Warn);
        assert!(
            c.detail.starts_with("pandas (ModuleNotFoundError), matplotlib (no answer) do not import here"),
            "{}",
            c.detail
        );
        assert!(c.detail.ends_with("; numpy 1.24.2 imports"), "{}", c.detail);
        assert_eq!(c.fix.as_deref(), Some("apt-get it"));
        // Hostile answers: escapes, other names, repeated and oversized lines.
        let evil =
            "lib numpy 1.0\x1b]52;c;AAAA\x07\nlib numpy 9.9\nlib os 1.0\nlib pandas none \x1b[2J\nlib matplotlib 3 x\n";
        let c = check(evil, "here", "f");
        assert!(!c.detail.contains('\x1b') && !c.detail.contains('\x07'), "{}", c.detail);
        assert!(!c.detail.contains("9.9") && !c.detail.contains("os 1.0"), "{}", c.detail);
        assert!(c.detail.contains("numpy (no answer)"), "{}", c.detail);
        assert!(c.detail.contains("pandas (an error)"), "{}", c.detail);
        let long = format!("lib numpy {}\n", "1".repeat(100));
        assert_eq!(check(&long, "here", "f").level, CheckLevel::Warn);
        let flood = "lib x 1\n".repeat(MAX_LINES) + "lib numpy 1.0\nlib pandas 1.0\nlib matplotlib 1.0\n";
        assert_eq!(check(&flood, "here", "f").level, CheckLevel::Warn);
    }

    #[test]
    fn packages_of_a_root_tree_say_the_same() {
        let v = [("python3", Some("3.11.2-1+b1".to_string())), ("python3-numpy", Some("1:1.24.2-1+deb12u1".into()))];
        let c = check_packages(&v, "in the guest", "f");
        assert_eq!(c.level, CheckLevel::Warn);
        assert!(c.detail.contains("pandas (NotInstalled), matplotlib (NotInstalled)"), "{}", c.detail);
        assert!(c.detail.ends_with("numpy 1.24.2 imports"), "{}", c.detail);
    }
}
