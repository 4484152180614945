//! The e2b tier against a local fake that speaks E2B's published API shapes
//! (REST OpenAPI spec + envd's Connect-RPC process API). Loopback only.
//! Every test ends by checking that no sandbox is left in the fake.

use crate::support::fake_e2b;

use std::sync::Arc;
use std::time::Duration;

use fake_e2b::{FakeE2b, Knobs, StartMode};
use sandbench::event::{EventKind, Phase, RunEvent, Stream, ViolationKind};
use sandbench::internals::e2b::E2bTier;
use sandbench::report::{Outcome, RunReport};
use sandbench::runner::{self, Update};
use sandbench::spec::{Language, RunSpec};
use sandbench::tier::Tier;

pub(crate) const KEY: &str = "e2b_0123456789abcdef";

pub(crate) fn tier(fake: &FakeE2b) -> Arc<dyn Tier> {
    Arc::new(E2bTier::with_settings(fake.settings(KEY)))
}

fn py(code: &str) -> RunSpec {
    RunSpec::new(Language::Python, code)
}

/// Events and the report of one run, with a safety-net timeout.
pub(crate) async fn run_collect(t: Arc<dyn Tier>, spec: RunSpec) -> (Vec<(f64, EventKind)>, RunReport) {
    tokio::time::timeout(Duration::from_secs(60), async {
        let mut h = runner::start(t, spec);
        let mut evs = vec![];
        while let Some(u) = h.events.recv().await {
            match u {
                Update::Finished(r) => return (evs, *r),
                Update::Event(ev) => evs.push((ev.at_ms, ev.kind)),
            }
        }
        panic!("no report");
    })
    .await
    .expect("the run did not end within 60 s")
}

pub(crate) async fn assert_nothing_left(fake: &FakeE2b) {
    assert_eq!(fake.live_count(), 0, "a sandbox was left running in the fake E2B");
    assert!(fake.wait_programs_gone(Duration::from_secs(5)).await, "a program kept running in the fake sandbox");
    assert!(sandbench::internals::e2b::live_sandboxes().iter().all(|id| !fake.created().contains(id)));
}

#[sandbench_testkit::test]
async fn lifecycle_streams_output_live_reports_exit_and_kills() {
    let fake = FakeE2b::start(KEY).await;
    let code = "import sys, time\nprint('first')\ntime.sleep(1.0)\nprint('second')\nsys.stderr.write('warn\\n')\nsys.exit(3)\n";
    let (evs, r) = run_collect(tier(&fake), py(code)).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.exit.code, Some(3));
    assert_eq!(r.stdout, "first\nsecond\n");
    assert_eq!(r.stderr, "warn\n");
    assert_eq!(r.tier, "e2b");

    // Phases in order, output before the exit, and streamed live: "first"
    // arrived well before the program ended.
    let phases: Vec<Phase> =
        evs.iter().filter_map(|(_, k)| if let EventKind::Phase(p) = k { Some(*p) } else { None }).collect();
    assert_eq!(phases, [Phase::Preparing, Phase::Booting, Phase::Running, Phase::TearingDown]);
    let first_out = evs
        .iter()
        .find(|(_, k)| matches!(k, EventKind::Output(Stream::Stdout, b) if b.starts_with(b"first")))
        .map(|(t, _)| *t)
        .expect("first output");
    let exit_at = evs.iter().find(|(_, k)| matches!(k, EventKind::Exit(_))).map(|(t, _)| *t).expect("exit");
    assert!(exit_at - first_out > 700.0, "output was not streamed live ({first_out} ms vs exit {exit_at} ms)");

    // Usage from envd's metrics; the limits E2B cannot enforce are said.
    assert_eq!(r.usage.peak_memory_bytes, Some(fake_e2b::MEM_USED));
    assert_eq!(r.usage.cpu_ms, None);
    let d = &r.details;
    assert_eq!(d["sandbox_killed"], true);
    assert!(d["limits"]["memory"].as_str().unwrap().starts_with("not enforced"));
    assert!(d["limits"]["pids"].as_str().unwrap().starts_with("not enforced"));
    assert!(d["limits"]["disk"].as_str().unwrap().starts_with("not enforced"));

    // The request shapes: template, TTL = wall time + margin, no internet;
    // envd calls carry the access token and the user.
    {
        let st = fake.state.lock().unwrap();
        let body = &st.create_bodies[0];
        assert_eq!(body["templateID"], "base");
        assert_eq!(body["timeout"], 10 + 30);
        assert_eq!(body["allow_internet_access"], false);
        // v2 has no `secure` (always secured); autoPause false so that E2B
        // kills, not pauses, a sandbox sandbench could not kill.
        assert!(body.get("secure").is_none(), "{body}");
        assert_eq!(body["autoPause"], false);
        assert_eq!(body["metadata"]["created_by"], "sandbench");
        assert_eq!(body["metadata"]["sandbench_pid"], std::process::id().to_string());
        let h = &st.start_headers[0];
        let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("x-access-token"), Some(format!("tok-{}", st.created[0])));
        assert_eq!(get("authorization").as_deref(), Some("Basic dXNlcjo="));
        // The program's environment is sandbench's scrubbed one: nothing of
        // this process's (E2B_API_KEY included) goes along.
        let envs = st.start_process[0]["envs"].as_object().unwrap();
        let names: Vec<&str> = envs.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["HOME", "LANG", "PATH", "TMPDIR"]);
        assert!(!st.start_process[0].to_string().contains(KEY));
        assert_eq!(st.start_process[0]["cwd"], "/home/user/sandbench");
        assert_eq!(st.killed, st.created);
    }
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn zero_exit_without_exit_code_field_is_exit_zero() {
    // protobuf JSON leaves out exitCode 0; the tier must not read it as unknown.
    let fake = FakeE2b::start(KEY).await;
    let (_, r) = run_collect(tier(&fake), RunSpec::new(Language::Sh, "echo hi\n")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.exit.code, Some(0));
    assert_eq!(r.stdout, "hi\n");
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn wall_timeout_kills_the_sandbox() {
    let fake = FakeE2b::start(KEY).await;
    let mut spec = py("import time\nprint('started', flush=True)\ntime.sleep(60)\n");
    spec.limits.wall_time = Duration::from_secs(1);
    let (_, r) = run_collect(tier(&fake), spec).await;
    assert_eq!(r.outcome, Outcome::Violation, "{r:#?}");
    assert!(r.has_violation(ViolationKind::WallTimeout));
    assert!(r.timings_ms.total < 10_000.0, "took {} ms", r.timings_ms.total);
    assert_eq!(fake.state.lock().unwrap().create_bodies[0]["timeout"], 1 + 30);
    assert_eq!(fake.killed().len(), 1);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn cancel_kills_the_sandbox() {
    let fake = FakeE2b::start(KEY).await;
    let mut h = runner::start(tier(&fake), py("import time\nprint('up', flush=True)\ntime.sleep(60)\n"));
    let r = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = h.events.recv().await {
            match u {
                Update::Event(RunEvent { kind: EventKind::Output(..), .. }) => h.cancel(),
                Update::Finished(r) => return *r,
                Update::Event(_) => {}
            }
        }
        panic!("no report")
    })
    .await
    .unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled, "{r:#?}");
    assert_eq!(fake.killed().len(), 1);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn output_limit_stops_and_kills() {
    let fake = FakeE2b::start(KEY).await;
    let mut spec = py("while True:\n    print('x' * 1000)\n");
    spec.limits.output_bytes = 20_000;
    let (_, r) = run_collect(tier(&fake), spec).await;
    assert_eq!(r.outcome, Outcome::Violation, "{r:#?}");
    assert!(r.has_violation(ViolationKind::OutputLimit));
    assert!(r.stdout_truncated);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn cpu_rlimit_inside_the_vm_is_a_cpu_violation() {
    let fake = FakeE2b::start(KEY).await;
    let mut spec = py("while True:\n    pass\n");
    spec.limits.cpu_time = Duration::from_secs(1);
    spec.limits.wall_time = Duration::from_secs(20);
    let (_, r) = run_collect(tier(&fake), spec).await;
    assert_eq!(r.outcome, Outcome::Violation, "{r:#?}");
    assert!(r.has_violation(ViolationKind::CpuTime), "{r:#?}");
    assert_eq!(r.exit.signal, Some(24));
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn rejected_key_is_a_clear_error_and_creates_nothing() {
    let fake = FakeE2b::start(KEY).await;
    let t: Arc<dyn Tier> = Arc::new(E2bTier::with_settings(fake.settings("e2b_wrong")));
    let (_, r) = run_collect(t, py("print(1)")).await;
    assert_eq!(r.outcome, Outcome::Error);
    let e = r.error.unwrap();
    assert!(e.contains("rejected the API key") && e.contains("E2B_API_KEY") && e.contains("401"), "{e}");
    assert!(!e.contains('\n'));
    assert!(fake.created().is_empty());
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn missing_key_names_the_variable() {
    let fake = FakeE2b::start(KEY).await;
    let mut s = fake.settings(KEY);
    s.api_key = None;
    let (_, r) = run_collect(Arc::new(E2bTier::with_settings(s)), py("print(1)")).await;
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.error.unwrap().contains("E2B_API_KEY is not set"));
    assert!(fake.state.lock().unwrap().log.is_empty(), "no request without a key");
}

#[sandbench_testkit::test]
async fn unknown_template_is_a_404_with_a_hint() {
    let fake = FakeE2b::start(KEY).await;
    let mut s = fake.settings(KEY);
    s.template = "nope".into();
    let (_, r) = run_collect(Arc::new(E2bTier::with_settings(s)), py("print(1)")).await;
    assert_eq!(r.outcome, Outcome::Error);
    let e = r.error.unwrap();
    assert!(e.contains("404") && e.contains("'nope'") && e.contains("[e2b] template"), "{e}");
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn rate_limit_is_retried_after_the_wait_it_asks_for() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { create_failures: vec![(429, Some(1))], ..Default::default() });
    let started = std::time::Instant::now();
    let (evs, r) = run_collect(tier(&fake), py("print('ok')")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert!(started.elapsed() >= Duration::from_secs(1), "retry-after was not honoured");
    assert!(evs.iter().any(|(_, k)| matches!(k, EventKind::Note(n) if n.contains("429") && n.contains("retrying"))));
    assert_eq!(fake.state.lock().unwrap().log.iter().filter(|l| *l == "POST /v2/sandboxes").count(), 2);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn rate_limit_with_a_long_wait_is_reported_not_waited() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { create_failures: vec![(429, Some(120))], ..Default::default() });
    let (_, r) = run_collect(tier(&fake), py("print('ok')")).await;
    assert_eq!(r.outcome, Outcome::Error);
    let e = r.error.unwrap();
    assert!(e.contains("429") && e.contains("retry after 120 s"), "{e}");
    assert!(r.timings_ms.total < 5000.0);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn server_errors_are_reported_without_retrying_create() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { create_failures: vec![(503, None)], ..Default::default() });
    let (_, r) = run_collect(tier(&fake), py("print('ok')")).await;
    assert_eq!(r.outcome, Outcome::Error);
    let e = r.error.unwrap();
    assert!(e.contains("server error") && e.contains("503"), "{e}");
    assert_eq!(fake.state.lock().unwrap().log.iter().filter(|l| *l == "POST /v2/sandboxes").count(), 1);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn a_dropped_stream_is_an_error_and_the_sandbox_is_killed() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { start: StartMode::DropAfterFirstChunk, ..Default::default() });
    let (_, r) = run_collect(tier(&fake), py("print('x')")).await;
    assert_eq!(r.outcome, Outcome::Error, "{r:#?}");
    let e = r.error.unwrap();
    assert!(e.contains("dropped"), "{e}");
    assert_eq!(r.stdout, "partial\n", "output before the drop is kept");
    assert_eq!(fake.killed().len(), 1);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn a_vanished_sandbox_is_an_error_and_still_killed() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { start: StartMode::Http502, ..Default::default() });
    let (_, r) = run_collect(tier(&fake), py("print('x')")).await;
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.error.unwrap().contains("sandbox is gone"));
    assert_eq!(fake.killed().len(), 1);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn a_connect_error_in_the_trailer_is_an_error() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { start: StartMode::RpcError, ..Default::default() });
    let (_, r) = run_collect(tier(&fake), py("print('x')")).await;
    assert_eq!(r.outcome, Outcome::Error);
    let e = r.error.unwrap();
    assert!(e.contains("internal") && e.contains("exec format error"), "{e}");
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn unreachable_api_is_a_clear_error() {
    // A port that was bound and released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let fake = FakeE2b::start(KEY).await;
    let mut s = fake.settings(KEY);
    s.api_url = format!("http://127.0.0.1:{port}");
    let (_, r) = run_collect(Arc::new(E2bTier::with_settings(s)), py("print(1)")).await;
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.error.unwrap().contains("cannot reach E2B"));
}

#[sandbench_testkit::test]
async fn a_failing_kill_is_retried() {
    let fake = FakeE2b::start(KEY).await;
    fake.knobs(Knobs { kill_failures: 2, ..Default::default() });
    let (_, r) = run_collect(tier(&fake), py("print(1)")).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.details["sandbox_killed"], true);
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn doctor_says_no_key_rejected_unreachable_or_ready() {
    let fake = FakeE2b::start(KEY).await;
    let mut s = fake.settings(KEY);
    s.api_key = None;
    let a = E2bTier::with_settings(s).probe().await;
    assert!(!a.available && a.summary.starts_with("no key"), "{a:?}");
    assert!(a.checks.iter().any(|c| c.fix.as_deref().unwrap_or("").contains("E2B_API_KEY")));

    let a = E2bTier::with_settings(fake.settings("e2b_bad")).probe().await;
    assert!(!a.available && a.summary.contains("key rejected"), "{a:?}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut s = fake.settings(KEY);
    s.api_url = format!("http://127.0.0.1:{port}");
    let a = E2bTier::with_settings(s).probe().await;
    assert!(!a.available && a.summary.starts_with("unreachable"), "{a:?}");

    let a = E2bTier::with_settings(fake.settings(KEY)).probe().await;
    assert!(a.available && a.summary.starts_with("ready"), "{a:?}");
    assert!(fake.created().is_empty(), "doctor must not start a sandbox");
}

/// An allow list goes to E2B as its own egress rules (the hosts in
/// `allowOut`, everything else denied); one E2B cannot enforce as given (a
/// port, an address) is refused before any sandbox exists.
#[sandbench_testkit::test]
async fn an_allow_list_becomes_e2b_egress_rules_or_is_refused() {
    let fake = FakeE2b::start(KEY).await;
    let mut spec = py("print('ok')\n");
    spec.limits.network = "allow=pypi.org,*.pythonhosted.org".parse().unwrap();
    let (_, r) = run_collect(tier(&fake), spec.clone()).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    {
        let st = fake.state.lock().unwrap();
        let body = &st.create_bodies[0];
        assert_eq!(body["allow_internet_access"], true, "{body}");
        assert_eq!(body["network"]["allowOut"], serde_json::json!(["pypi.org", "*.pythonhosted.org"]), "{body}");
        assert_eq!(body["network"]["denyOut"], serde_json::json!(["0.0.0.0/0"]), "{body}");
    }
    assert!(r.details["limits"]["network"].as_str().unwrap().contains("E2B's own egress rules"), "{}", r.details);
    for bad in ["allow=pypi.org:443", "allow=203.0.113.7", "allow=api.test:8443"] {
        spec.limits.network = bad.parse().unwrap();
        let (_, r) = run_collect(tier(&fake), spec.clone()).await;
        assert_eq!(r.outcome, Outcome::Error, "{bad}");
        assert!(r.error.as_deref().unwrap_or("").contains("cannot enforce the allow entry"), "{bad}: {:?}", r.error);
    }
    assert_eq!(fake.state.lock().unwrap().create_bodies.len(), 1, "a refused run made no sandbox");
    assert_nothing_left(&fake).await;
}

#[sandbench_testkit::test]
async fn a_session_keeps_its_sandbox_and_files_and_cleans_up_after_each_call() {
    use sandbench::session::{Session, SessionSpec};
    let fake = FakeE2b::start(KEY).await;
    let mut spec = SessionSpec::new(sandbench::spec::Limits::default());
    spec.max_life = Duration::from_secs(120);
    let s = Session::open(tier(&fake), spec).await.unwrap();
    assert_eq!(fake.live_count(), 1);
    let r1 = s.run(py("open('notes.txt', 'w').write('from call one')\nprint('wrote')\n")).await.unwrap();
    assert_eq!(r1.outcome, Outcome::Ok, "{r1:#?}");
    let r2 = s.run(py("print(open('notes.txt').read())\n")).await.unwrap();
    assert_eq!(r2.outcome, Outcome::Ok, "{r2:#?}");
    assert_eq!(r2.stdout, "from call one\n");
    assert_eq!(r2.session.as_ref().unwrap().call, 2);
    assert_eq!(r2.details["start"], "session");
    assert!(r2.details["limits"]["memory"].as_str().unwrap().starts_with("not enforced"));
    let (created, cleanups, timeout) = {
        let st = fake.state.lock().unwrap();
        let id = st.created[0].clone();
        (st.created.clone(), st.cleanups.clone(), st.live.get(&id).map(|sb| sb.timeout))
    };
    // One sandbox for both calls, whose E2B timeout is the session's cap
    // plus the margin; its user's processes ended after each call.
    assert_eq!(created.len(), 1);
    assert_eq!(timeout, Some(150));
    assert_eq!(cleanups, vec![created[0].clone(), created[0].clone()]);
    s.close().await;
    assert_eq!(fake.killed(), created);
    assert_nothing_left(&fake).await;
}
