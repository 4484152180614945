//! Files in and out of an MCP session (`write_file`, `read_file`,
//! `list_files`) on every tier that keeps sessions, driven by the official
//! Python client — and the attacker's pass: the program plants links to the
//! host's files, a link to `/`, a FIFO, a hard link, names with newlines,
//! escapes, bidi controls and invalid UTF-8, a large sparse file, then the
//! client asks for `/proc`, `..` escapes, huge reads and writes past the
//! session's disk and file size limits. Every refusal says why; nothing is
//! followed; the program's names reach the reply as data, made inert in text.

use base64::Engine;
use serde_json::{json, Value};

use crate::support::common::OuterNet;
use crate::support::docker_common::tier_ready;
use crate::support::fake_e2b::FakeE2b;
use crate::support::mcp::{call, lines_of, message, sdk_python, Home};

const NOTES: &str = "héllo\n\x1b[31mred\u{202e}reversed\n";
const PLANT: &str = r#"
import os
os.symlink('/etc/passwd', 'pw')
os.symlink('/', 'root')
os.mkfifo('fifo')
os.link('proj/notes.txt', 'hard')
open(b'weird\nname\xe2\x80\xaex', 'w').write('w')
open(b'\xff\x1b[2J', 'w').write('x')
with open('sparse', 'wb') as f:
    f.truncate(6 << 20)
print('planted')
"#;

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn session(args: Value) -> Value {
    let mut a = args;
    a["session"] = json!("$session");
    a
}

/// The round trip and the attacker's pass on `tier`; `limits_enforced`:
/// the tier enforces disk and file size limits (E2B does not), and a write
/// into a full scratch is tried.
fn round_trip(tier: &str, server_args: &[&str], envs: &[(&str, String)], limits_enforced: bool) {
    let py = sdk_python();
    let home = Home::new("[process]\nspare = false\n");
    let tool = "#!/bin/sh\necho tool-ran\n";
    let mut steps = vec![
        call("open_session", json!({"tier": tier, "limits": {"disk": "12M", "file_size": "8M"}})),
        call("write_file", session(json!({"path": "proj/notes.txt", "content": NOTES}))),
        call(
            "write_file",
            session(json!({"path": "/work/bin/tool.sh", "content_base64": b64(tool.as_bytes()), "mode": "755"})),
        ),
        call(
            "run_code",
            session(
                json!({"language": "sh", "code": "sh bin/tool.sh; python3 -c \"import os; print('%o' % (os.stat('bin/tool.sh').st_mode & 0o777))\"; cat proj/notes.txt | wc -c"}),
            ),
        ),
        call("run_code", session(json!({"language": "python", "code": PLANT}))),
        call("read_file", session(json!({"path": "proj/notes.txt"}))),
        call("list_files", session(json!({"depth": 3}))),
        call("read_file", session(json!({"path": "pw"}))),
        call("read_file", session(json!({"path": "root/etc/passwd"}))),
        call("read_file", session(json!({"path": "fifo"}))),
        call("read_file", session(json!({"path": "hard", "offset": 1, "length": 4}))),
        call("read_file", session(json!({"path": "sparse"}))),
        call("read_file", session(json!({"path": "/proc/self/environ"}))),
        call("read_file", session(json!({"path": "../../etc/passwd"}))),
        call("write_file", session(json!({"path": "root/tmp/planted", "content": "x"}))),
        call("write_file", session(json!({"path": "pw", "content": "root::0:0::/:/bin/sh\n"}))),
        call(
            "run_code",
            session(
                json!({"language": "python", "code": "import os\nprint(os.readlink('pw'), os.path.lexists('/tmp/planted'))"}),
            ),
        ),
        call("write_file", session(json!({"path": "toolarge", "content": {"$repeat": ["x", (1 << 20) + 1]}}))),
        call("list_files", session(json!({"path": "nope"}))),
        call("list_files", session(json!({"depth": 0}))),
    ];
    if limits_enforced {
        steps.push(call("write_file", session(json!({"path": "big", "content": {"$repeat": ["y", 1 << 20]}}))));
        // Fill the scratch (files below the size limit) until the disk is full.
        let fill = "for i in 1 2 3; do dd if=/dev/zero of=fill$i bs=1M count=7 2>/dev/null; done; echo filled";
        steps.push(call("run_code", session(json!({"language": "sh", "code": fill}))));
        steps.push(call("write_file", session(json!({"path": "more", "content": {"$repeat": ["z", 4096]}}))));
    }
    steps.push(call("close_session", json!({"session": "$session"})));
    let n = steps.len();
    let mut args = vec!["--tiers", tier];
    args.extend_from_slice(server_args);
    let net = OuterNet::new();
    let mut cmd = home.command(&py, &Value::Array(steps), &args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = net.output(&mut cmd, std::time::Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{tier}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let o = lines_of(&stdout);
    assert_eq!(o.len(), n, "{stdout}");
    let ok = |i: usize| {
        assert_eq!(o[i]["is_error"], false, "{tier} step {i}: {:.2000}", o[i].to_string());
        &o[i]["structured"]
    };
    let refused = |i: usize, want: &str| {
        let m = message(&o[i]);
        assert!(m.contains(want), "{tier} step {i}: wanted {want:?} in {:.2000}", o[i].to_string());
    };
    assert_eq!(ok(1)["bytes"], NOTES.len());
    assert_eq!(ok(2)["mode"], "755");
    assert_eq!(ok(3)["stdout"], format!("tool-ran\n755\n{}\n", NOTES.len()), "{}", o[3]["structured"]["stderr"]);
    assert_eq!(ok(4)["stdout"], "planted\n", "{}", o[4]);
    // Read back exactly, as base64 (the text holds an escape and a bidi
    // override, which no structured string carries raw); the text block
    // shows controls and bidi inert.
    let r = ok(5);
    assert_eq!(
        (r["content_base64"].as_str(), r["encoding"].as_str(), r["eof"].as_bool(), r.get("content")),
        (Some(b64(NOTES.as_bytes()).as_str()), Some("base64"), Some(true), None)
    );
    let text = o[5]["text"].as_str().unwrap();
    assert!(!text.contains('\x1b') && !text.contains('\u{202e}'), "{text:?}");
    assert!(text.contains("␛[31m") && text.contains("<U+202E>"), "{text:?}");
    // The listing: links listed, never followed; names as data.
    let entries = ok(6)["entries"].as_array().unwrap().clone();
    let find = |p: &str| {
        entries.iter().find(|e| e["path"] == p).unwrap_or_else(|| panic!("{tier}: no {p:?} in {entries:?}")).clone()
    };
    assert_eq!(find("pw")["type"], "symlink");
    assert_eq!(find("pw")["link_target"], "/etc/passwd");
    assert_eq!(find("root")["type"], "symlink");
    assert_eq!(find("fifo")["type"], "fifo");
    assert_eq!(find("proj/notes.txt")["type"], "file");
    assert_eq!(find("bin/tool.sh")["mode"], "755");
    assert_eq!(find("sparse")["size"], 6 << 20);
    // A name with a newline and a bidi override: shown by name, exact in hex.
    let weird = find("weird␤name<U+202E>x");
    assert_eq!(
        (&weird["type"], &weird["path_hex"]),
        (&json!("file"), &json!("weird\nname\u{202e}x".bytes().map(|b| format!("{b:02x}")).collect::<String>()))
    );
    assert!(entries.iter().any(|e| e["path_hex"] == "ff1b5b324a"), "{entries:?}");
    assert!(!entries.iter().any(|e| e["path"].as_str().unwrap().starts_with("root/")), "followed the link to /");
    assert!(!entries.iter().any(|e| e["path"] == "main.py"), "the helper's own file is listed: {entries:?}");
    let text = o[6]["text"].as_str().unwrap();
    assert!(!text.contains('\x1b') && !text.contains('\u{202e}'), "{text:?}");
    refused(7, "/work/pw is a symbolic link");
    refused(8, "/work/root is a symbolic link");
    refused(9, "/work/fifo is a FIFO");
    // A hard link inside /work is an ordinary file; a part of it is read.
    let r = ok(10);
    assert_eq!(
        (r["content"].as_str(), r["size"].as_u64(), r["eof"].as_bool()),
        (Some("éll"), Some(NOTES.len() as u64), Some(false))
    );
    assert_eq!(r["next_offset"], 5);
    // A large file comes in parts, never all at once.
    // (At most 1 MiB, and what base64 of it leaves of the session's 1M output limit.)
    let r = ok(11);
    let len = r["length"].as_u64().unwrap();
    assert!(len > 512 << 10 && len <= 1 << 20, "{len}");
    assert_eq!(
        (r["eof"].as_bool(), r["next_offset"].as_u64(), r["size"].as_u64()),
        (Some(false), Some(len), Some(6 << 20))
    );
    refused(12, "/proc/self/environ is outside /work");
    refused(13, "climbs out of /work");
    refused(14, "/work/root is a symbolic link");
    refused(15, "/work/pw is a symbolic link");
    assert_eq!(ok(16)["stdout"], "/etc/passwd False\n", "{}", o[16]["structured"]["stderr"]);
    refused(17, "write_file takes at most 1M");
    refused(18, "/work/nope does not exist");
    refused(19, "depth 0");
    let mut i = 20;
    if limits_enforced {
        assert_eq!(ok(20)["bytes"], 1 << 20);
        assert_eq!(ok(21)["stdout"], "filled\n");
        // Said as the helper found it, or (docker's loader cannot even write
        // the helper into a full scratch) as the call's failure with the hint.
        let m = message(&o[22]);
        assert!(
            m.contains("no space left in the session's scratch") || m.contains("a scratch at its disk limit, 12M"),
            "{tier}: {m}"
        );
        i = 23;
    }
    assert_eq!(ok(i)["closed"], true);
    // The file tools are in the run log by what they did, not with their content.
    let log = std::fs::read_to_string(home.state().join("runs.jsonl")).unwrap();
    assert!(log.contains("# write_file /work/proj/notes.txt"), "{log}");
    assert!(!log.contains("red\\u202e"), "a file's content went into the run log");
    assert!(net.leftover_cgroups().is_empty(), "cgroups left: {:?}", net.leftover_cgroups());
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_files_on_process() {
    round_trip("process", &[], &[], true);
}

#[sandbench_testkit::test(needs = ["docker", "mcp"])]
fn mcp_files_on_docker() {
    if tier_ready("docker") {
        round_trip("docker", &[], &[], true);
    }
}

#[sandbench_testkit::test(needs = ["gvisor", "mcp"])]
fn mcp_files_on_gvisor() {
    if tier_ready("gvisor") {
        round_trip("gvisor", &[], &[], true);
    }
}

#[sandbench_testkit::test(needs = ["microvm", "mcp"])]
fn mcp_files_on_microvm() {
    // Not filled to the brim: a guest whose /work is filled dies (a kernel
    // panic on its console), which is the microVM tier's to fix; the file
    // tools' own refusal of a full scratch is tested on the other tiers.
    round_trip("microvm", &[], &[], false);
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn mcp_files_on_e2b_against_the_fake() {
    const KEY: &str = "e2b_feedfacecafebeef";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeE2b::start(KEY));
    let envs = [("E2B_API_KEY", KEY.to_string()), ("E2B_API_URL", fake.url()), ("E2B_SANDBOX_URL", fake.url())];
    // E2B enforces no disk or file size limit (the report says so).
    round_trip("e2b", &[], &envs, false);
    assert_eq!(fake.live_count(), 0, "the session's sandbox was not killed");
}
