//! `sandbench report`: the page and its JSON record from one run of a small
//! gauntlet and a latency benchmark on the process tier, reused for the JSON;
//! then the page in a real browser (Debian's Chromium, headless): it loads
//! with no console message at all (the page's Content-Security-Policy turns
//! any attempt to load or run something into one), a screenshot is taken, and
//! every number the rendered page shows equals the JSON's. A control page
//! with a script and an outside image must produce console messages, so the
//! check can fail. Skipped when Chromium is missing, unless
//! `SANDBENCH_REQUIRE_TIERS` names `report` (CI installs it:
//! `.ci/setup-report.sh`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::common::{self, bin, samples_dir, OuterNet};

/// A hostile sample whose output is markup and escapes: the page must show it as text.
const INJECTION: &str =
    "# name: html-injection\n# tries: print markup, a script and terminal escapes into the report\n\
# must: appear as inert text in the report\n# expect: *=ok\n\
print(\"<script>document.title='pwned'</script><img src=http://127.0.0.1:9/x.png>\\x1b]52;c;aGk=\\x07\\u202e\")\n\
print(\"outcome ok\\u2028\\u2066\\u200b\\ufeff\\u00ad\\U000e0041\\ufe0f\\u2069\")\n";

fn small_samples(dir: &Path) {
    for g in ["benign", "hostile"] {
        std::fs::create_dir_all(dir.join(g)).unwrap();
    }
    std::fs::copy(samples_dir().join("benign/hello.py"), dir.join("benign/hello.py")).unwrap();
    for s in ["fork_bomb.py", "secrets_env.py", "escape_injection.py"] {
        std::fs::copy(samples_dir().join("hostile").join(s), dir.join("hostile").join(s)).unwrap();
    }
    std::fs::write(dir.join("hostile/html_injection.py"), INJECTION).unwrap();
}

fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|c| sandbench::host::which(c));
    if found.is_none() {
        assert!(
            !common::required("report"),
            "SANDBENCH_REQUIRE_TIERS names report, but Chromium is not installed (apt-get install chromium; .ci/setup-report.sh)"
        );
        panic!(
            "cannot run although its needs hold: the browser test needs Debian's chromium (apt-get install chromium)"
        );
    }
    found
}

/// Chromium headless as root in a container-like machine, with a fresh
/// profile and nothing of its own going to the network.
fn browser(chrome: &Path, profile: &Path, extra: &[&str], page: &Path) -> (String, String) {
    let out = Command::new(chrome)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .output()
        .expect("start chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

fn fmt(v: &serde_json::Value, dp: usize) -> String {
    match v {
        serde_json::Value::Number(n) => format!("{:.dp$}", n.as_f64().unwrap()),
        serde_json::Value::Null => "—".into(),
        other => panic!("not a number: {other}"),
    }
}

/// (JSON pointer, decimals, the text shown) of every tagged number in `dom`.
fn tagged(dom: &str) -> Vec<(String, usize, String)> {
    dom.split("data-json=\"")
        .skip(1)
        .map(|part| {
            let ptr = part[..part.find('"').unwrap()].to_string();
            let dp = part.split("data-dp=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            let text = part[part.find('>').unwrap() + 1..part.find('<').unwrap()].to_string();
            (ptr, dp, text)
        })
        .collect()
}

#[sandbench_testkit::test(needs = ["report"])]
fn report_page_and_json_agree_in_a_real_browser() {
    let home = tempfile::tempdir().unwrap();
    let samples = home.path().join("samples");
    small_samples(&samples);
    let state = home.path().join("state");
    let net = OuterNet::new();
    let page = home.path().join("report.html");
    let run = |args: &[&str]| {
        let mut cmd = Command::new(bin());
        cmd.arg("report").args(args).env("SANDBENCH_STATE_DIR", &state).current_dir(home.path()).stdin(Stdio::null());
        net.output(&mut cmd, Duration::from_secs(600))
    };
    let out =
        run(&["--tiers", "process", "--repeat", "3", "--samples", samples.to_str().unwrap(), "-o", "report.html"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("wrote {}", page.display())), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    // The same record again from what was kept, as JSON.
    let out = run(&["--reuse", "--format", "json", "-o", "report.json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("reusing the gauntlet") && err.contains("reusing the latency"), "{err}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join("report.json")).unwrap()).unwrap();

    // What it measured.
    assert_eq!(record["latency"]["data"]["summary"]["tiers"][0]["runs"], 3, "{record:#}");
    let cells = record["gauntlet"]["data"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 5, "one cell per sample");
    assert_eq!(record["gauntlet"]["data"]["mismatches"], 0, "{:#}", record["gauntlet"]["data"]);
    assert_eq!(record["frontier"]["points"][0]["tier"], "process", "{:#}", record["frontier"]);
    assert_eq!(record["frontier"]["points"][0]["hostile"], 4);
    assert!(record["machine"]["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    assert_eq!(record["machine"]["cgroup"], sandbench::share::cgroup_version());
    assert!(record["latency"]["data"]["host"]["samples"].as_u64().unwrap() > 0, "the host was probed");
    // The hostile output is in the page, as text only.
    assert!(!html.contains("<script") && !html.contains("<img"), "markup from a sandbox got through");
    assert!(html.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"));
    assert!(html.contains("␛]52;c;aGk=^G"));
    // Invisible, bidi and tag characters are shown by name, never raw.
    assert!(
        html.contains(
            "outcome ok&lt;U+2028&gt;&lt;U+2066&gt;&lt;U+200B&gt;&lt;U+FEFF&gt;&lt;U+00AD&gt;&lt;U+E0041&gt;"
        ),
        "{html}"
    );
    let raw: Vec<String> = html
        .chars()
        .filter(|c| !matches!(c, '\n' | '\t') && sandbench::sanitize::is_hidden(*c))
        .map(|c| format!("U+{:04X}", c as u32))
        .collect();
    assert!(raw.is_empty(), "raw hidden characters in the page: {raw:?}");

    let Some(chrome) = chromium() else { return };
    let profile = tempfile::tempdir().unwrap();
    // The check can fail: a page that runs a script and loads an outside
    // (loopback) image produces console messages.
    let control = home.path().join("control.html");
    std::fs::write(
        &control,
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\"></head>\
<body><img src=\"http://127.0.0.1:9/x.png\"><script>undefinedFn()</script></body></html>",
    )
    .unwrap();
    let (_, err) = browser(&chrome, profile.path(), &["--dump-dom"], &control);
    assert!(!console_lines(&err).is_empty(), "the control page's errors were not seen:\n{err}");

    let profile = tempfile::tempdir().unwrap();
    let shot = home.path().join("report.png");
    let (_, err) = browser(
        &chrome,
        profile.path(),
        &["--window-size=1280,2400", &format!("--screenshot={}", shot.display())],
        &page,
    );
    assert!(console_lines(&err).is_empty(), "console messages: {:?}", console_lines(&err));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 20_000, "{} bytes", png.len());

    let profile = tempfile::tempdir().unwrap();
    let (dom, err) = browser(&chrome, profile.path(), &["--dump-dom"], &page);
    assert!(console_lines(&err).is_empty(), "console messages: {:?}", console_lines(&err));
    assert!(dom.contains("<h1>sandbench report</h1>"), "{}", &dom[..dom.len().min(400)]);
    // The browser ran no script from the sandbox's output.
    assert!(!dom.contains("pwned</title>"));
    let shown = tagged(&dom);
    assert!(shown.len() > 40, "{} numbers", shown.len());
    for (ptr, dp, text) in &shown {
        let v = record.pointer(ptr).unwrap_or_else(|| panic!("{ptr} is not in the JSON"));
        assert_eq!(text, &fmt(v, *dp), "{ptr}");
    }
    for must in ["/frontier/points/0/latency_ms", "/latency/data/summary/tiers/0/exit_ms/p50", "/safety/0/contained"] {
        assert!(shown.iter().any(|(p, _, _)| p == must), "{must} is not shown");
    }
}

#[sandbench_testkit::test]
fn report_refuses_bad_input_in_one_line() {
    for (args, want) in [
        (&["report", "--tiers", "nosuch"][..], "unknown tier 'nosuch'"),
        (&["report", "--repeat", "0"][..], "--repeat"),
        (&["report", "--format", "pdf"][..], "--format"),
    ] {
        let out = Command::new(bin()).args(args).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
