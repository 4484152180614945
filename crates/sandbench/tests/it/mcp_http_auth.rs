//! `sandbench mcp --http` as a local user, a web page and a second client
//! would try it: a bearer token by default (in a private file), rmcp's own
//! Host and Origin checks (403 for a foreign origin or a rebound name, token
//! or not), MCP sessions bound to the token that opened them, a second uid
//! that can neither read the token nor call, and headless Chromium running
//! a hostile page from another loopback origin (fetch, form posts, no-cors
//! requests, a DNS-rebinding-style Host) that must not run any code.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::common::{self, OuterNet};
use crate::support::docker_common::eventually;
use crate::support::mcp::{call, initialize, post, sdk_python, Home, HttpServer};

fn host(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn http_needs_the_bearer_token_from_a_private_file() {
    let py = sdk_python();
    let home = Home::new("");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &[]);
    let path = server.token_path.clone().expect("the server names its token file on stderr");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(server.token.len(), 64);
    let port = server.port;
    // No token, a wrong one, another scheme: 401, and nothing starts.
    for headers in [
        vec![],
        vec!["Authorization: Bearer 0000000000000000000000000000000000000000000000000000000000000000".to_string()],
        vec![format!("Authorization: Basic {}", server.token)],
        vec![format!("Authorization: Bearer {}x", server.token)],
    ] {
        let h: Vec<&str> = headers.iter().map(String::as_str).collect();
        let r = post(port, &host(port), &h, &initialize());
        assert_eq!(r.status, 401, "{headers:?}: {r:?}");
        assert!(r.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")), "{r:?}");
        assert!(r.header("mcp-session-id").is_none());
    }
    // The official client without the token is refused too.
    let out = net.output(
        &mut server.client(&py, &json!([call("run_code", json!({"language": "sh", "code": "echo hi"}))]), None),
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "a client without the token got through");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Server returned an error response") || err.contains("401"), "{err}");
    assert!(home.runs().is_empty(), "code ran without the token");
    // With it, all is as before.
    let out = server.drive(&net, &py, json!([call("run_code", json!({"language": "sh", "code": "echo hi"}))]));
    assert_eq!(out[0]["structured"]["stdout"], "hi\n");
    server.stop();
    assert!(!path.exists(), "the token file goes with the server");
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn a_foreign_origin_or_host_is_refused_even_with_the_token() {
    let home = Home::new("");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &["--allow-origin", "http://localhost:6274"]);
    let port = server.port;
    let auth = format!("Authorization: Bearer {}", server.token);
    for (host_h, origin, with_token) in [
        (host(port), Some("http://evil.test".to_string()), true),
        (host(port), Some("http://evil.test".to_string()), false),
        (host(port), Some(format!("http://127.0.0.1:{}", port + 1)), true),
        (host(port), Some("null".to_string()), true),
        (format!("evil.test:{port}"), None, true),
        (format!("evil.test:{port}"), None, false),
        (format!("localhost.evil.test:{port}"), Some(format!("http://localhost.evil.test:{port}")), true),
    ] {
        let mut h = vec![];
        let o = origin.map(|o| format!("Origin: {o}"));
        if let Some(o) = &o {
            h.push(o.as_str());
        }
        if with_token {
            h.push(auth.as_str());
        }
        let r = post(port, &host_h, &h, &initialize());
        assert_eq!(r.status, 403, "Host {host_h}, {o:?}, token {with_token}: {r:?}");
    }
    // The origin the operator allowed, and no Origin at all, pass.
    let r = post(port, &host(port), &["Origin: http://localhost:6274", &auth], &initialize());
    assert_eq!(r.status, 200, "{r:?}");
    let r = post(port, &format!("localhost:{port}"), &[&auth], &initialize());
    assert_eq!(r.status, 200, "{r:?}");
    assert!(home.runs().is_empty());
    server.stop();
}

#[sandbench_testkit::test(needs = ["mcp"])]
fn an_mcp_session_belongs_to_the_token_that_opened_it() {
    let py = sdk_python();
    let home = Home::new("");
    let net = OuterNet::new();
    let file = home.dir.path().join("tokens");
    std::fs::write(&file, "# two clients\nalice-token-0123456789abcdef\nbob-token-0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = HttpServer::start(&home, &net, &["--token-file", file.to_str().unwrap()]);
    assert!(server.token_path.is_none());
    let port = server.port;
    let alice = "Authorization: Bearer alice-token-0123456789abcdef";
    let bob = "Authorization: Bearer bob-token-0123456789abcdef";
    let r = post(port, &host(port), &[alice], &initialize());
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.header("mcp-session-id").expect("a session id");
    let sid = format!("Mcp-Session-Id: {id}");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let r = post(port, &host(port), &[alice, &sid], &initialized);
    assert_eq!(r.status, 202, "{r:?}");
    // Bob knows Alice's session id: as if it did not exist.
    let r = post(port, &host(port), &[bob, &sid], &list);
    assert_eq!(r.status, 404, "{r:?}");
    let r = post(port, &host(port), &[alice, &sid], &list);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("run_code"), "{r:?}");
    // Each token works with the official client.
    for t in ["alice-token-0123456789abcdef", "bob-token-0123456789abcdef"] {
        let out = net
            .output(&mut server.client(&py, &json!([call("list_tiers", json!({}))]), Some(t)), Duration::from_secs(60));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    server.stop();
}

#[sandbench_testkit::test(needs = ["mcp", "root", "cmd:setpriv"])]
fn a_second_local_user_can_neither_read_the_token_nor_call() {
    if !common::is_root() {
        panic!("cannot run although its needs hold: needs root to act as a second uid");
    }
    let home = Home::new("");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &[]);
    let path = server.token_path.clone().unwrap();
    let nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = nobody(&["cat", path.to_str().unwrap()]);
    assert!(!out.status.success(), "nobody read the token: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&server.token));
    let out = nobody(&["ls", path.parent().unwrap().to_str().unwrap()]);
    assert!(!out.status.success(), "nobody listed the token's directory");
    // Over the port: no token, a guess, and nobody's attempt to open a session.
    let probe = format!(
        "import json, urllib.request, urllib.error\n\
         body = json.dumps({{'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {{'protocolVersion': '2025-06-18', 'capabilities': {{}}, 'clientInfo': {{'name': 'nobody', 'version': '1'}}}}}}).encode()\n\
         for auth in [None, 'Bearer ' + '0' * 64, 'Bearer ']:\n\
         \x20   h = {{'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'}}\n\
         \x20   if auth: h['Authorization'] = auth\n\
         \x20   try:\n\
         \x20       r = urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:{}/mcp', data=body, headers=h), timeout=20)\n\
         \x20       print(r.status)\n\
         \x20   except urllib.error.HTTPError as e:\n\
         \x20       print(e.code)\n",
        server.port
    );
    let out = nobody(&["/usr/bin/python3", "-c", &probe]);
    let codes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        codes.split_whitespace().collect::<Vec<_>>(),
        ["401", "401", "401"],
        "{codes} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(home.runs().is_empty());
    server.stop();
}

/// One request as the browser sent it through the test's proxy, and the
/// status the MCP server answered (0: not forwarded).
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    url: String,
    host: String,
    origin: Option<String>,
    status: u16,
}

/// A forward proxy for Chromium: serves the hostile pages, forwards every
/// other request to the MCP server verbatim (its Host and Origin untouched),
/// and records what the server answered.
struct Proxy {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    done: Arc<Mutex<Option<String>>>,
}

/// A request line, its headers and its body.
type Head = (String, Vec<(String, String)>, Vec<u8>);

fn read_head(s: &mut TcpStream) -> Option<Head> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut headers = vec![];
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len.min(1 << 20)];
    r.read_exact(&mut body).ok()?;
    Some((line.trim_end().to_string(), headers, body))
}

impl Proxy {
    fn start(mcp_port: u16, page: String, rebind_page: String) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(vec![]));
        let done = Arc::new(Mutex::new(None));
        let (s2, d2) = (seen.clone(), done.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { continue };
                let (seen, done, page, rebind_page) = (s2.clone(), d2.clone(), page.clone(), rebind_page.clone());
                std::thread::spawn(move || {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                    let Some((line, headers, body)) = read_head(&mut c) else { return };
                    let mut parts = line.split(' ');
                    let (method, url) =
                        (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
                    let get = |n: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v.clone());
                    let host = get("host").unwrap_or_default();
                    let path = url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap_or_else(|| "/".into());
                    let reply = |c: &mut TcpStream, status: &str, ctype: &str, body: &str| {
                        let _ = c.write_all(
                            format!(
                                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        );
                    };
                    // The hostile pages, on their own origins.
                    if host == format!("127.0.0.1:{port}") || host == format!("localhost:{port}") {
                        if path.starts_with("/done") {
                            *done.lock().unwrap() = Some(String::from_utf8_lossy(&body).into_owned());
                            return reply(&mut c, "200 OK", "text/plain", "ok");
                        }
                        return reply(&mut c, "200 OK", "text/html", &page);
                    }
                    if host == format!("rebind.test:{mcp_port}") && method == "GET" && path == "/" {
                        return reply(&mut c, "200 OK", "text/html", &rebind_page);
                    }
                    if host == format!("rebind.test:{mcp_port}") && path.starts_with("/done") {
                        *done.lock().unwrap() = Some(String::from_utf8_lossy(&body).into_owned());
                        return reply(&mut c, "200 OK", "text/plain", "ok");
                    }
                    if !path.starts_with("/mcp") {
                        return reply(&mut c, "404 Not Found", "text/plain", "");
                    }
                    // Everything else goes to the MCP server as the browser sent it.
                    let mut up = match TcpStream::connect(("127.0.0.1", mcp_port)) {
                        Ok(u) => u,
                        Err(_) => return reply(&mut c, "502 Bad Gateway", "text/plain", ""),
                    };
                    let mut req = format!("{method} {path} HTTP/1.1\r\n");
                    for (k, v) in &headers {
                        if !k.eq_ignore_ascii_case("connection") && !k.eq_ignore_ascii_case("proxy-connection") {
                            req.push_str(&format!("{k}: {v}\r\n"));
                        }
                    }
                    req.push_str("Connection: close\r\n\r\n");
                    let _ = up.write_all(req.as_bytes());
                    let _ = up.write_all(&body);
                    let _ = up.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut resp = vec![];
                    let _ = up.read_to_end(&mut resp);
                    let status = String::from_utf8_lossy(&resp)
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    seen.lock().unwrap().push(Seen { method, url, host, origin: get("origin"), status });
                    let _ = c.write_all(&resp);
                });
            }
        });
        Proxy { port, seen, done }
    }
}

#[sandbench_testkit::test(needs = ["mcp", "chromium"])]
fn a_web_page_in_chromium_cannot_run_code_through_the_server() {
    let home = Home::new("");
    let net = OuterNet::new();
    let server = HttpServer::start(&home, &net, &[]);
    let mcp_url = format!("http://127.0.0.1:{}/mcp", server.port);
    let init = initialize();
    let call_body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "run_code",
        "arguments": {"language": "sh", "code": "echo pwned"}}})
    .to_string();
    // The worst case: the page knows the token (it leaked). Origin and Host
    // checks must stop it on their own.
    let token = server.token.clone();
    let attacks = format!(
        r#"<!doctype html><html><body><iframe name="sink" style="display:none"></iframe><script>
const url = {mcp_url:?}, token = {token:?}, init = {init:?}, call = {call_body:?};
const log = [];
async function tryit(name, f) {{ try {{ const r = await f(); log.push(name + ': ' + (r && r.type) + ' ' + (r && r.status)); }} catch (e) {{ log.push(name + ': blocked ' + e); }} }}
(async () => {{
  await tryit('fetch json + token', () => fetch(url, {{method: 'POST', headers: {{'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream', 'Authorization': 'Bearer ' + token}}, body: init}}));
  await tryit('fetch no-cors text/plain', () => fetch(url, {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body: call}}));
  await tryit('fetch no-cors initialize', () => fetch(url, {{method: 'POST', mode: 'no-cors', body: init}}));
  await tryit('fetch GET stream', () => fetch(url, {{mode: 'no-cors', headers: {{'Accept': 'text/event-stream'}}}}));
  await tryit('beacon', async () => ({{type: 'beacon', status: navigator.sendBeacon(url, call)}}));
  const f = document.createElement('form'); f.method = 'POST'; f.action = url; f.enctype = 'text/plain'; f.target = 'sink';
  const i = document.createElement('input'); i.name = call.slice(0, -2); i.value = '"}}'; f.appendChild(i); document.body.appendChild(f); f.submit();
  const img = new Image(); img.src = url + '?x=1';
  await new Promise(r => setTimeout(r, 1500));
  await fetch('/done', {{method: 'POST', body: log.join('\n')}});
}})();
</script></body></html>"#
    );
    let rebind = format!(
        r#"<!doctype html><html><body><script>
const token = {token:?}, init = {init:?}, call = {call_body:?};
const log = [];
(async () => {{
  for (const [name, opts] of [
    ['same-origin POST + token', {{method: 'POST', headers: {{'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream', 'Authorization': 'Bearer ' + token}}, body: init}}],
    ['same-origin GET + token', {{headers: {{'Accept': 'text/event-stream', 'Authorization': 'Bearer ' + token}}}}],
    ['same-origin call', {{method: 'POST', headers: {{'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream', 'Authorization': 'Bearer ' + token}}, body: call}}],
  ]) {{
    try {{ const r = await fetch('/mcp', opts); log.push(name + ': ' + r.status + ' ' + (await r.text()).slice(0, 80)); }} catch (e) {{ log.push(name + ': error ' + e); }}
  }}
  await fetch('/done', {{method: 'POST', body: log.join('\n')}});
}})();
</script></body></html>"#
    );
    let proxy = Proxy::start(server.port, attacks, rebind);
    let chromium = ["chromium", "chromium-browser"].iter().find_map(|c| sandbench::host::which(c)).unwrap();
    for page in [format!("http://127.0.0.1:{}/attack.html", proxy.port), format!("http://rebind.test:{}/", server.port)]
    {
        *proxy.done.lock().unwrap() = None;
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("--proxy-server=http://127.0.0.1:{}", proxy.port))
            .arg("--proxy-bypass-list=<-loopback>")
            .arg(&page)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while proxy.done.lock().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = browser.kill();
        let _ = browser.wait();
        let log = proxy.done.lock().unwrap().clone().unwrap_or_else(|| panic!("{page} never finished"));
        eprintln!("{page}:\n{log}");
    }
    let seen = proxy.seen.lock().unwrap().clone();
    eprintln!("requests that reached the server: {seen:#?}");
    assert!(seen.len() >= 5, "the attacks never reached the server: {seen:?}");
    for s in &seen {
        assert!(
            s.status == 401 || s.status == 403,
            "the server answered {} to {} {} (Host {}, Origin {:?})",
            s.status,
            s.method,
            s.url,
            s.host,
            s.origin
        );
        // With the leaked token or not, a browser's request from another
        // origin, or for a rebound name, is refused by the Origin/Host check.
        if s.origin.is_some() || s.host.starts_with("rebind.test") {
            assert_eq!(s.status, 403, "{s:?}");
        }
    }
    assert!(seen.iter().any(|s| s.host.starts_with("rebind.test")), "no rebinding request was made: {seen:?}");
    assert!(home.runs().is_empty(), "a web page ran code: {:?}", home.runs());
    server.stop();
    assert!(eventually(20, || net.remaining().is_empty()));
}
