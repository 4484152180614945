//! The e2b tier's requests against what E2B's official SDK (`e2b` 2.63 on
//! PyPI) sends, checked on a local fake that answers like the real service:
//! the StartRequest's `stdin`, the v2 endpoints, envd routing, the Connect
//! deadline and how programs are started. Loopback only.

use std::time::Duration;

use crate::e2b_lifecycle::{assert_nothing_left, run_collect, tier, KEY};
use crate::support::fake_e2b::{FakeE2b, Knobs};
use sandbench::config::{Config, RemoteEnv};
use sandbench::internals::e2b::Settings;
use sandbench::report::Outcome;
use sandbench::spec::{Language, RunSpec};

#[sandbench_testkit::test]
async fn a_program_reading_stdin_gets_end_of_file_at_once() {
    // envd gives a process an open stdin pipe unless the Start says
    // `stdin: false` (the fake does the same): `cat` would then wait for
    // the wall-time kill, where every other tier hands it an empty stdin.
    let fake = FakeE2b::start(KEY).await;
    let mut spec = RunSpec::new(Language::Sh, "cat\necho done\n");
    spec.limits.wall_time = Duration::from_secs(20);
    let (_, r) = run_collect(tier(&fake), spec).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.stdout, "done\n");
    assert_eq!(fake.state.lock().unwrap().start_messages[0]["stdin"], false);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn the_deprecated_v1_create_and_list_are_refused_like_e2b_does() {
    // The fake is strict where the service is: a client still on the v1
    // forms fails here instead of passing against a lenient fake.
    let fake = FakeE2b::start(KEY).await;
    let http = sandbench::http::client(&[fake.url().as_str()]).unwrap();
    let create = http
        .post(format!("{}/sandboxes", fake.url()))
        .header("X-API-Key", KEY)
        .json(&serde_json::json!({"templateID": "base"}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status().as_u16(), 410);
    let list = http.get(format!("{}/sandboxes", fake.url())).header("X-API-Key", KEY).send().await.unwrap();
    assert_eq!(list.status().as_u16(), 410);
    // The tier itself creates through v2 and lists nothing through v1.
    let (_, r) = run_collect(tier(&fake), RunSpec::new(Language::Sh, "echo hi\n")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    let log = fake.state.lock().unwrap().log.clone();
    assert!(log.iter().any(|l| l == "POST /v2/sandboxes"), "{log:?}");
    assert_eq!(log.iter().filter(|l| l.ends_with(" /sandboxes")).count(), 2, "{log:?}");
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn listing_follows_next_token_pages_for_reaping_and_doctor() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { max_page: Some(2), ..Default::default() });
    // An owner that has gone (its lock released) stands in for a dead sandbench.
    let dead = sandbench::owner::Owner::acquire_in(&sandbench::owner::dir()).unwrap();
    let dead_token = dead.token().to_string();
    drop(dead);
    for i in 0..5 {
        fake.insert_foreign(
            &format!("orphan{i}"),
            serde_json::json!({"created_by": "sandbench", "sandbench_owner": dead_token, "sandbench_pid": "1"}),
        );
    }
    fake.insert_foreign("someone-elses", serde_json::json!({"created_by": "someone"}));
    let api = sandbench::internals::e2b::Api::new(&fake.settings(KEY), KEY).unwrap();
    assert_eq!(api.list().await.unwrap().len(), 6);
    // Five orphans over three pages of two: all of them, and nothing else.
    assert_eq!(sandbench::internals::e2b::reap_orphans(&api).await, 5);
    assert_eq!(fake.live_ids(), ["someone-elses"]);
    let log = fake.state.lock().unwrap().log.clone();
    assert!(log.iter().all(|l| l != "GET /sandboxes"), "{log:?}");
}

/// The e2b settings a given environment gives, as `Config::load` reads it.
fn settings_for(vars: &[(&str, &str)]) -> Settings {
    let vars: std::collections::HashMap<String, String> =
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let config = Config { env: RemoteEnv::from_lookup(|k| vars.get(k).cloned()), ..Config::default() };
    Settings::from_config(&config)
}

#[sandbench_testkit::test]
fn envd_is_reached_the_way_the_sdk_routes_it() {
    // E2B's own domains: one host for every sandbox, routed by the
    // E2b-Sandbox-Id / E2b-Sandbox-Port headers (ConnectionConfig.get_sandbox_url).
    let s = settings_for(&[]);
    assert_eq!(s.api_url, "https://api.e2b.app");
    assert_eq!(s.envd_url("sbx1", None), "https://sandbox.e2b.app");
    // The domain the create answered wins over the configured one.
    assert_eq!(s.envd_url("sbx1", Some("e2b.dev")), "https://sandbox.e2b.dev");
    let s = settings_for(&[("E2B_DOMAIN", "e2b.dev")]);
    assert_eq!(
        (s.api_url.as_str(), s.envd_url("sbx1", None)),
        ("https://api.e2b.dev", "https://sandbox.e2b.dev".into())
    );
    // A self-hosted domain has no header-routing edge: the per-sandbox host.
    let s = settings_for(&[("E2B_DOMAIN", "e2b.example.org")]);
    assert_eq!(s.api_url, "https://api.e2b.example.org");
    assert_eq!(s.envd_url("sbx1", None), "https://49983-sbx1.e2b.example.org");
}

#[sandbench_testkit::test]
fn the_sdk_environment_overrides_are_honoured() {
    let s = settings_for(&[
        ("E2B_API_URL", "http://127.0.0.1:3000"),
        ("E2B_SANDBOX_URL", "http://127.0.0.1:49983"),
        ("E2B_DOMAIN", "e2b.dev"),
    ]);
    assert_eq!(s.api_url, "http://127.0.0.1:3000");
    assert_eq!(s.envd_url("sbx1", Some("e2b.app")), "http://127.0.0.1:49983");
    // E2B_DEBUG=true is the SDK's local mode; only the word true turns it on.
    let s = settings_for(&[("E2B_DEBUG", "TRUE")]);
    assert_eq!(
        (s.api_url.as_str(), s.envd_url("sbx1", None)),
        ("http://localhost:3000", "http://localhost:49983".into())
    );
    let s = settings_for(&[("E2B_DEBUG", "true"), ("E2B_API_URL", "http://127.0.0.1:1")]);
    assert_eq!(s.api_url, "http://127.0.0.1:1");
    let s = settings_for(&[("E2B_DEBUG", "1")]);
    assert_eq!(s.envd_url("sbx1", None), "https://sandbox.e2b.app");
    // Blank values are unset, as in the SDK (`os.getenv(..) or default`).
    let s = settings_for(&[("E2B_DOMAIN", " "), ("E2B_API_KEY", "")]);
    assert_eq!(s.domain, "e2b.app");
    assert_eq!(s.api_key, None);
}

#[sandbench_testkit::test]
async fn every_envd_call_names_the_sandbox_and_envds_port() {
    // The fake, like E2B's edge, routes envd calls by these headers and
    // refuses a call without the port.
    let fake = FakeE2b::start(KEY).await;
    let (_, r) = run_collect(tier(&fake), RunSpec::new(Language::Sh, "echo hi\n")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    let st = fake.state.lock().unwrap();
    let h = &st.start_headers[0];
    let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("e2b-sandbox-id"), Some(st.created[0].clone()));
    assert_eq!(get("e2b-sandbox-port").as_deref(), Some("49983"));
}

#[sandbench_testkit::test]
async fn start_carries_a_connect_deadline_just_past_the_wall_time() {
    // envd's own deadline is the second line of defence: it kills the
    // program if sandbench's kill never arrives. Wall time 10 s + 5 s grace.
    let fake = FakeE2b::start(KEY).await;
    let (_, r) = run_collect(tier(&fake), RunSpec::new(Language::Sh, "echo hi\n")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    let st = fake.state.lock().unwrap();
    let h = &st.start_headers[0];
    let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("connect-timeout-ms").as_deref(), Some("15000"));
}

#[sandbench_testkit::test]
async fn programs_start_the_way_commands_run_starts_them() {
    // /bin/bash -l -c, as the SDK's commands.run; the sh program itself runs
    // as a file under /bin/sh after the limits, as on every other tier.
    let fake = FakeE2b::start(KEY).await;
    let (_, r) = run_collect(
        tier(&fake),
        RunSpec::new(Language::Sh, "echo \"$0\"\nshopt -q login_shell 2>/dev/null || echo not-bash\n"),
    )
    .await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    let st = fake.state.lock().unwrap();
    let p = &st.start_process[0];
    assert_eq!(p["cmd"], "/bin/bash");
    assert_eq!(p["args"][0], "-l");
    assert_eq!(p["args"][1], "-c");
    assert!(p["args"][2].as_str().unwrap().ends_with("exec /bin/sh /home/user/sandbench/main.sh"), "{p}");
    assert!(r.stdout.ends_with("main.sh\nnot-bash\n"), "{}", r.stdout);
}

#[sandbench_testkit::test]
async fn envd_ending_the_call_at_its_deadline_is_an_error_naming_it() {
    // The fake, as envd, kills the program at the Connect deadline and ends
    // the call with deadline_exceeded; the client reports envd's code.
    let fake = FakeE2b::start(KEY).await;
    let settings = fake.settings(KEY);
    let api = sandbench::internals::e2b::Api::new(&settings, KEY).unwrap();
    let created = api.create("base", 60, &sandbench::egress::Network::None, &|_| {}).await.unwrap();
    let envd = sandbench::internals::e2b::Envd::new(
        sandbench::http::client(&[fake.url().as_str()]).unwrap(),
        fake.url(),
        created.sandbox_id.clone(),
        created.envd_access_token.clone(),
    );
    let args = ["-c".to_string(), "sleep 60".to_string()];
    let mut stream =
        envd.start("/bin/sh", &args, &Default::default(), "/", Some(Duration::from_millis(200))).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match stream.next().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the call ended without the deadline error"),
                Err(e) => return e,
            }
        }
    })
    .await
    .expect("envd's deadline did not end the call");
    assert!(err.to_string().contains("deadline_exceeded"), "{err}");
    assert!(api.kill(&created.sandbox_id).await.unwrap());
    assert!(fake.wait_programs_gone(Duration::from_secs(5)).await);
}

/// Runs `openssl` with `args` in `dir`; false when it is missing or fails.
fn openssl(dir: &std::path::Path, args: &[&str]) -> bool {
    std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[sandbench_testkit::test(needs = ["cmd:openssl"])]
async fn tls_trusts_the_system_ca_store_as_well_as_the_bundled_roots() {
    // A corporate proxy's CA is in the system store, not in the bundled
    // roots. Here: a CA made for the test, named by SSL_CERT_FILE (how the
    // system store is overridden), a TLS server on loopback signed by it, and
    // `sandbench doctor`: with the CA the handshake succeeds (the server is
    // not E2B, so what follows is a reply sandbench cannot read); without it
    // the connection fails.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let made = openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=sandbench test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    ) && openssl(
        d,
        &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost"],
    ) && std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .is_ok()
        && openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "srv.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "srv.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
    if !made {
        // Not a tier: nothing in SANDBENCH_REQUIRE_TIERS asks for it.
        panic!("cannot run although its needs hold: tls test: the openssl command is not available to make a CA");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _server = tokio::process::Command::new("openssl")
        .args([
            "s_server",
            "-quiet",
            "-www",
            "-accept",
            &format!("127.0.0.1:{port}"),
            "-cert",
            "srv.pem",
            "-key",
            "srv.key",
        ])
        .current_dir(d)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..500 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(up, "openssl s_server did not listen");
    let doctor = |with_ca: bool| {
        let mut c = crate::e2b_cli::sandbench(&dir);
        c.env("E2B_API_KEY", KEY).env("E2B_API_URL", format!("https://localhost:{port}"));
        if with_ca {
            c.env("SSL_CERT_FILE", d.join("ca.pem"));
        }
        c.args(["doctor", "--format", "json"]);
        c
    };
    let summary = |out: std::process::Output| {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let e2b = v.as_array().unwrap().iter().find(|a| a["tier"] == "e2b").unwrap().clone();
        e2b["summary"].as_str().unwrap().to_string()
    };
    let trusted = summary(doctor(true).output().await.unwrap());
    assert!(trusted.contains("cannot read"), "the handshake failed with the CA in the store: {trusted}");
    let untrusted = summary(doctor(false).output().await.unwrap());
    assert!(untrusted.starts_with("unreachable"), "a server no store trusts was accepted: {untrusted}");
}
