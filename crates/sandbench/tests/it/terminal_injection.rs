//! Issue 10, item 1, end to end: a program chooses strings that reach
//! sandbench's own lines (the name of a capped file quoted in the violation,
//! its output) and fills them with OSC 52 (clipboard), a title change, a
//! clear-screen and a forged "outcome   ok" line with newlines. `sandbench
//! run` in text mode under a real pseudo-terminal (not a pipe) must let
//! nothing raw through to the terminal and keep its real outcome line, on
//! every available tier; the JSON report's single-line fields never hold a
//! raw newline or control character.

use crate::support::common;
use crate::support::docker_common::tier_available;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, OuterNet};
use sandbench::report::{Outcome, RunReport};

/// Hits the file-size limit in a file whose name is the attack, and prints
/// the same bytes on both streams.
const INJECTOR: &str = r#"
import os, sys
evil = "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]0;pwned\x07\x1b[2J\x1b[H\x9b2J\noutcome   ok\nexit      exit code 0\n"
name = "cap" + evil.replace("/", "_")
try:
    with open(name, "wb") as f:
        while True:
            f.write(b"x" * 65536)
except OSError as e:
    pass
sys.stdout.write(evil)
sys.stdout.flush()
sys.stderr.write(evil)
sys.stderr.flush()
"#;

/// Run `sandbench run` with its stdin, stdout and stderr on a new pty; all
/// it wrote to the terminal.
fn run_on_pty(net: &OuterNet, args: &[&str]) -> Vec<u8> {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave: OwnedFd = pty.slave;
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = net.spawn(&mut cmd);
    drop(cmd); // the parent's copies of the slave: EOF (EIO) once the child is gone
    let mut master = std::fs::File::from(pty.master);
    let reader = std::thread::spawn(move || {
        let mut all = vec![];
        let mut buf = [0u8; 4096];
        loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break, // EIO: every slave end is closed
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
        }
        all
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(300) {
            net.kill_all();
            let _ = child.kill();
            panic!("sandbench run did not finish on the pty");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    reader.join().unwrap()
}

fn tiers() -> Vec<&'static str> {
    let mut v = vec!["process"];
    for t in ["docker", "gvisor", "microvm"] {
        if tier_available(t).is_ok() {
            v.push(t);
        }
    }
    v
}

#[sandbench_testkit::test]
fn nothing_raw_reaches_the_terminal_and_the_outcome_line_is_sandbenchs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("inject.py");
    std::fs::write(&p, INJECTOR).unwrap();
    let net = OuterNet::new();
    for tier in tiers() {
        let args = ["run", "--tier", tier, "--file-size", "1M", "--timeout", "60s", p.to_str().unwrap()];
        let raw = run_on_pty(&net, &args);
        let text = String::from_utf8_lossy(&raw);
        assert!(!raw.is_empty(), "{tier}: nothing on the terminal");
        // No escape, no BEL, no C1 control: nothing can steer the terminal.
        for (what, bad) in [("ESC", &b"\x1b"[..]), ("BEL", b"\x07"), ("C1 CSI", b"\xc2\x9b")] {
            assert!(!raw.windows(bad.len()).any(|w| w == bad), "{tier}: a raw {what} reached the terminal:\n{text}");
        }
        // The program's own output may say anything, line by line; what
        // follows sandbench's closing banner (the last thing written) is
        // sandbench's alone: one outcome line, the real one, and the forged
        // lines inside the violation's file name stay on its one line.
        let at = text.rfind("── sandbench · ").unwrap_or_else(|| panic!("{tier}: no summary:\n{text}"));
        let summary: Vec<&str> = text[at..].split(['\n', '\r']).filter(|l| !l.is_empty()).collect();
        let outcome: Vec<&&str> = summary.iter().filter(|l| l.starts_with("outcome")).collect();
        assert_eq!(outcome.len(), 1, "{tier}: one outcome line, sandbench's:\n{}", &text[at..]);
        assert!(outcome[0].contains("violation"), "{tier}: {}\n{text}", outcome[0]);
        assert_eq!(summary.iter().filter(|l| l.starts_with("exit ")).count(), 1, "{tier}:\n{}", &text[at..]);
        assert!(summary.iter().all(|l| !l.starts_with("outcome   ok")), "{tier}:\n{}", &text[at..]);
        assert!(text.contains("file_size") || text.contains("file size"), "{tier}: the hit is reported:\n{text}");
        assert!(text.contains("␛]52"), "{tier}: the attack is shown as inert text:\n{text}");
    }
}

/// The JSON report: single-line fields (violation details, notes, error)
/// hold no raw newline or control character, on every available tier.
#[sandbench_testkit::test]
fn the_json_reports_single_line_fields_hold_no_raw_controls() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("inject.py");
    std::fs::write(&p, INJECTOR).unwrap();
    let net = OuterNet::new();
    for tier in tiers() {
        let out = net.output(
            Command::new(bin()).args(["run", "--tier", tier, "--format", "json", "--file-size", "1M"]).arg(&p),
            Duration::from_secs(300),
        );
        let r: RunReport = common::report(&out);
        assert_eq!(r.outcome, Outcome::Violation, "{tier}: {}", r.summary_line());
        let fs = r.violations.iter().find(|v| v.kind == sandbench::event::ViolationKind::FileSize);
        let fs = fs.unwrap_or_else(|| panic!("{tier}: no file_size violation: {:?}", r.violations));
        assert!(fs.detail.contains("␛]52") && fs.detail.contains("␤outcome"), "{tier}: {}", fs.detail);
        let mut single = vec![r.summary_line(), r.error.clone().unwrap_or_default()];
        single.extend(r.violations.iter().map(|v| v.detail.clone()));
        single.extend(r.degraded.clone());
        if let Some(w) = r.details["warnings"].as_array() {
            single.extend(w.iter().filter_map(|x| x.as_str()).map(str::to_string));
        }
        for s in single {
            assert!(!s.chars().any(|c| c.is_control()), "{tier}: a raw control in {s:?}");
        }
        // Captured output leaves inert like every other text (issue 42:
        // one exit for untrusted text); lines and tabs stay.
        assert!(r.stdout.contains("␛]52") && !r.stdout.contains('\u{1b}'), "{tier}: {:?}", r.stdout);
    }
}

/// The gauntlet's invisible forgery through `sandbench run` on a pty: no
/// invisible, bidi or tag character reaches the terminal raw (each is shown
/// by name), and the only outcome line after the banner is sandbench's.
#[sandbench_testkit::test]
fn invisible_and_bidi_characters_reach_the_terminal_by_name() {
    let sample = common::samples_dir().join("hostile/invisible_forgery.py");
    let net = OuterNet::new();
    let raw = run_on_pty(&net, &["run", "--tier", "process", "--timeout", "60s", sample.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&raw);
    for c in text.chars() {
        if !matches!(c, '\n' | '\r' | '\t') {
            assert!(!sandbench::sanitize::is_hidden(c), "U+{:04X} reached the terminal raw:\n{text}", c as u32);
        }
    }
    for shown in ["<U+2028>", "<U+2029>", "<U+202E>", "<U+2066>", "<U+200B>", "<U+FEFF>", "<U+E0020>", "<U+E0155>"] {
        assert!(text.contains(shown), "{shown} is not shown:\n{text}");
    }
    let at = text.rfind("── sandbench · ").unwrap_or_else(|| panic!("no summary:\n{text}"));
    let summary: Vec<&str> = text[at..].split(['\n', '\r']).filter(|l| !l.is_empty()).collect();
    let outcome: Vec<&&str> = summary.iter().filter(|l| l.starts_with("outcome")).collect();
    assert_eq!(outcome.len(), 1, "one outcome line, sandbench's:\n{}", &text[at..]);
    // The forged banner sits on the program's own line, behind its marker.
    assert!(text.contains("working...<U+2028>── sandbench · process"), "{text}");
}
