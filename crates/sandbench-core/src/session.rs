//! Sessions: one sandbox kept alive between calls, so that files a call
//! writes in `/work` are there for the next one (the way agents work: write
//! a file, run it, read the result).
//!
//! Every call is a fresh process in the kept sandbox, run through the same
//! runner and judged by the same judge as a one-shot run; its report says
//! which session and which call it was ([`SessionRef`]). Limits come in two
//! kinds: the sandbox's own (memory, disk, pids, file size, open files, cpus,
//! network), set when the session is opened and shared by every call, and
//! each call's (CPU time, wall time, output), which a call may lower but
//! never raise past the session's. A session also has a wall-clock cap from
//! its opening and an idle timeout; either closes it.
//!
//! Nothing outlives its session: [`Session::close`], the idle timeout, the
//! cap and [`close_all`] (sandbench exiting, `tier::shutdown`) tear the
//! sandbox down; a sandbench killed outright leaves sandboxes named with its
//! owner token, which the reapers at the next start remove (`owner.rs`). A
//! call's leftover processes are killed when the call ends on every tier.
//!
//! A tier keeps sessions by implementing [`crate::tier::Tier::open_session`]
//! and returning a [`TierSession`]; one that cannot says why in
//! [`crate::tier::Tier::sessions`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use crate::report::SessionRef;
use crate::runner::{self, RunHandle};
use crate::spec::{format_duration, format_size, Limits, RunSpec};
// The tier's side of a session is part of the tier contract; re-exported
// here, where front ends look for sessions.
use crate::event::RunContext;
use crate::tier::contract::{BoxFuture, Tier, TierExit};
pub use crate::tier::contract::{SessionSpec, TierSession, DEFAULT_IDLE, DEFAULT_MAX_LIFE};

/// How long a call that runs into the session's cap may take to end on its
/// own (its wall time was cut to the cap) before it is cancelled.
const CAP_GRACE: Duration = Duration::from_secs(10);

/// Per-call limits: what a call may lower (each tier enforces them per
/// process or from the host). The rest belong to the sandbox and are set
/// when it is built.
const PER_CALL: &str = "cpu_time, wall_time, output";

/// A call's limits: the per-call ones as the call asks (each at most the
/// session's), the sandbox's own from the session whatever the call says.
pub fn call_limits(session: &Limits, call: &Limits) -> Result<Limits, String> {
    let above = |what: &str, v: String, max: String| {
        Err(format!("{what} {v} is above this session's {max} (open a session with more, or ask for less)"))
    };
    if call.cpu_time > session.cpu_time {
        return above("cpu_time", format_duration(call.cpu_time), format_duration(session.cpu_time));
    }
    if call.wall_time > session.wall_time {
        return above("wall_time", format_duration(call.wall_time), format_duration(session.wall_time));
    }
    if call.output_bytes > session.output_bytes {
        return above("output", format_size(call.output_bytes), format_size(session.output_bytes));
    }
    Ok(Limits {
        cpu_time: call.cpu_time,
        wall_time: call.wall_time,
        output_bytes: call.output_bytes,
        ..session.clone()
    })
}

/// Why a call could not start in a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("session {id} is closed ({why}); open a new one")]
    Closed { id: String, why: String },
    #[error("session {0} is running another call; wait for it to finish (a session runs one call at a time)")]
    Busy(String),
    #[error("{0}")]
    Limits(String),
}

struct State {
    calls: u32,
    last_active: Instant,
    busy: bool,
    /// Why it closed (or is closing).
    closed: Option<String>,
    /// The running call's canceller.
    current: Option<CancellationToken>,
}

struct Inner {
    id: String,
    tier: String,
    spec: SessionSpec,
    ts: Arc<dyn TierSession>,
    opened: Instant,
    opened_at: String,
    /// Held by a call from start to end; `close` takes it to wait for one.
    gate: Arc<tokio::sync::Mutex<()>>,
    state: Mutex<State>,
    /// Wakes the watchdog when a call starts or ends.
    changed: Notify,
    /// Fires once the sandbox is gone.
    gone: CancellationToken,
    /// What the opener asked to keep while the sandbox exists.
    hold: Mutex<Option<Hold>>,
}

/// Anything kept alive with a session's sandbox (see [`Session::open_holding`]).
pub type Hold = Box<dyn std::any::Any + Send + Sync>;

/// A session: cheap to clone; every clone is the same session.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

/// What a front end shows about a session.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub tier: String,
    pub calls: u32,
    /// RFC 3339, UTC.
    pub opened_at: String,
    pub age_ms: u64,
    pub idle_ms: u64,
    pub max_life_ms: u64,
    pub idle_timeout_ms: u64,
    pub limits: Limits,
    /// Why it closed; None while open.
    pub closed: Option<String>,
}

fn registry() -> &'static Mutex<HashMap<String, Session>> {
    static R: OnceLock<Mutex<HashMap<String, Session>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Ids of the sessions this process has open.
pub fn open_ids() -> Vec<String> {
    registry().lock().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// Close every open session of this process and wait until each sandbox is
/// gone (sandbench exiting).
pub async fn close_all(why: &str) {
    let all: Vec<Session> = registry().lock().map(|m| m.values().cloned().collect()).unwrap_or_default();
    futures_util::future::join_all(all.iter().map(|s| s.close_because(why))).await;
}

fn new_id() -> anyhow::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 6];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom for a session id: {e}"))?;
    Ok(format!("s-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
}

impl Session {
    /// Build the sandbox a session keeps, on `tier`. A tier that cannot
    /// keep sessions, or limits it cannot enforce, are refused first.
    pub async fn open(tier: Arc<dyn Tier>, spec: SessionSpec) -> anyhow::Result<Session> {
        Session::open_holding(tier, spec, Box::new(())).await
    }

    /// [`Session::open`], with `hold` kept for exactly as long as the
    /// sandbox may exist: dropped once it is torn down, or once an open
    /// that failed (or that nobody waited for any more) has cleaned up. A
    /// server's slot for the session (`admission::Permit`) goes here, so an
    /// open the client cancels still counts until its sandbox is gone.
    pub async fn open_holding(tier: Arc<dyn Tier>, spec: SessionSpec, hold: Hold) -> anyhow::Result<Session> {
        tier.sessions().map_err(|e| anyhow::anyhow!(e))?;
        tier.check_limits(&spec.limits).map_err(|e| anyhow::anyhow!(e))?;
        if spec.max_life.is_zero() || spec.idle_timeout.is_zero() {
            anyhow::bail!("a session needs a lifetime cap and an idle timeout above zero");
        }
        let id = new_id()?;
        // The tier's open runs to its end even if the caller gives up (an
        // MCP client cancelling open_session): a sandbox half made and then
        // forgotten would outlive everything. Nobody waiting: it is closed.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let open_spec = spec.clone();
        let t = tier.clone();
        tokio::spawn(async move {
            let r = t.open_session(open_spec).await;
            match r {
                Ok(ts) => {
                    if let Err((Ok(ts), hold)) = tx.send((Ok(ts), hold)) {
                        ts.close().await;
                        drop(hold);
                    }
                }
                // The tier cleaned up before it returned its error.
                Err(e) => {
                    let _ = tx.send((Err(e), Box::new(())));
                    drop(hold);
                }
            }
        });
        let (ts, hold) = rx.await.map_err(|_| anyhow::anyhow!("the {} tier's session task failed", tier.name()))?;
        let ts = ts?;
        let now = Instant::now();
        let inner = Arc::new(Inner {
            id: id.clone(),
            tier: tier.name().to_string(),
            spec,
            ts,
            opened: now,
            opened_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            gate: Arc::new(tokio::sync::Mutex::new(())),
            state: Mutex::new(State { calls: 0, last_active: now, busy: false, closed: None, current: None }),
            changed: Notify::new(),
            gone: CancellationToken::new(),
            hold: Mutex::new(Some(hold)),
        });
        let s = Session { inner };
        if let Ok(mut m) = registry().lock() {
            m.insert(id.clone(), s.clone());
        }
        tokio::spawn(watchdog(s.clone()));
        tracing::info!("session {id} opened on {}", s.inner.tier);
        Ok(s)
    }

    pub fn id(&self) -> &str {
        &self.inner.id
    }

    pub fn tier(&self) -> &str {
        &self.inner.tier
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.spec.limits
    }

    pub fn spec(&self) -> &SessionSpec {
        &self.inner.spec
    }

    /// Fires once the session's sandbox is gone (closed for any reason).
    pub fn gone(&self) -> CancellationToken {
        self.inner.gone.clone()
    }

    pub fn is_closed(&self) -> bool {
        self.inner.state.lock().map(|s| s.closed.is_some()).unwrap_or(true)
    }

    pub fn info(&self) -> SessionInfo {
        let st = self.inner.state.lock();
        let (calls, idle, closed) = match &st {
            Ok(s) => (s.calls, s.last_active.elapsed(), s.closed.clone()),
            Err(_) => (0, Duration::ZERO, Some("internal error".into())),
        };
        SessionInfo {
            id: self.inner.id.clone(),
            tier: self.inner.tier.clone(),
            calls,
            opened_at: self.inner.opened_at.clone(),
            age_ms: self.inner.opened.elapsed().as_millis() as u64,
            idle_ms: idle.as_millis() as u64,
            max_life_ms: self.inner.spec.max_life.as_millis() as u64,
            idle_timeout_ms: self.inner.spec.idle_timeout.as_millis() as u64,
            limits: self.inner.spec.limits.clone(),
            closed,
        }
    }

    /// Start a call. The spec's per-call limits must be at most the
    /// session's; the sandbox's own limits are the session's whatever the
    /// spec says. The call's wall time is cut to what is left of the
    /// session's cap. One call at a time.
    pub fn start(&self, mut spec: RunSpec) -> Result<RunHandle, CallError> {
        let inner = &self.inner;
        let mut limits = call_limits(&inner.spec.limits, &spec.limits).map_err(CallError::Limits)?;
        let left = inner.spec.max_life.saturating_sub(inner.opened.elapsed());
        let mut cut_to_cap = false;
        if left < limits.wall_time {
            limits.wall_time = left.max(Duration::from_millis(1));
            cut_to_cap = true;
        }
        spec.limits = limits;
        let call = {
            let mut st = inner.state.lock().map_err(|_| CallError::Busy(inner.id.clone()))?;
            if let Some(why) = &st.closed {
                return Err(CallError::Closed { id: inner.id.clone(), why: why.clone() });
            }
            if st.busy {
                return Err(CallError::Busy(inner.id.clone()));
            }
            if left.is_zero() {
                return Err(CallError::Closed { id: inner.id.clone(), why: "it reached its lifetime cap".into() });
            }
            st.busy = true;
            st.calls += 1;
            st.calls
        };
        let target = Arc::new(Call { session: self.clone(), call, cut_to_cap });
        let handle = runner::start_target(target, spec, usize::MAX);
        if let Ok(mut st) = inner.state.lock() {
            st.current = Some(handle.canceller());
        }
        inner.changed.notify_one();
        Ok(handle)
    }

    /// Run a call to its end and return its report.
    pub async fn run(&self, spec: RunSpec) -> Result<crate::report::RunReport, CallError> {
        Ok(self.start(spec)?.report().await)
    }

    /// Close: no new call starts, a running one is cancelled and waited
    /// for, then the sandbox is torn down. Returns once it is gone.
    /// Idempotent: a second close waits for the first.
    pub async fn close(&self) {
        self.close_because("closed by its user").await
    }

    async fn close_because(&self, why: &str) {
        let inner = &self.inner;
        let first = match inner.state.lock() {
            Ok(mut st) => {
                if let Some(c) = &st.current {
                    c.cancel();
                }
                if st.closed.is_none() {
                    st.closed = Some(why.to_string());
                    true
                } else {
                    false
                }
            }
            Err(_) => false,
        };
        inner.changed.notify_one();
        if !first {
            inner.gone.cancelled().await;
            return;
        }
        // Wait for a running call to end (cancelled above).
        let _held = inner.gate.lock().await;
        inner.ts.close().await;
        drop(inner.hold.lock().ok().and_then(|mut h| h.take()));
        if let Ok(mut m) = registry().lock() {
            m.remove(&inner.id);
        }
        tracing::info!("session {} closed: {why}", inner.id);
        inner.gone.cancel();
    }
}

/// Why a session whose sandbox died closes, in the tier's words when it has them.
fn died(ts: &dyn TierSession) -> String {
    match ts.ended_why() {
        Some(why) => format!("its sandbox died: {}", crate::sanitize::inert_line(&why, 300)),
        None => "its sandbox died".into(),
    }
}

/// How often an idle session's sandbox is checked: one that died between
/// calls (its container removed, its guest killed) is closed, with the
/// reason, within this.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// Closes the session at its cap, when it has been idle too long, or when
/// its sandbox died between calls.
async fn watchdog(s: Session) {
    let inner = &s.inner;
    let cap = tokio::time::Instant::from_std(inner.opened + inner.spec.max_life);
    loop {
        let (busy, last) = match inner.state.lock() {
            Ok(st) if st.closed.is_none() => (st.busy, st.last_active),
            _ => return,
        };
        let idle_end = tokio::time::Instant::from_std(last + inner.spec.idle_timeout);
        let wake = if busy { cap } else { idle_end.min(cap) };
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = inner.changed.notified() => continue,
            _ = inner.gone.cancelled() => return,
            _ = tokio::time::sleep(LIVENESS_CHECK), if !busy => {
                if !inner.ts.alive() && !s.is_busy() {
                    s.close_because(&died(&*inner.ts)).await;
                    return;
                }
                continue;
            }
        }
        let now = tokio::time::Instant::now();
        if now >= cap {
            if busy {
                // The call's wall time was cut to the cap: let it end on its
                // own (a wall_timeout in its report) before cancelling it.
                tokio::select! {
                    _ = tokio::time::sleep(CAP_GRACE) => {}
                    _ = async { while s.is_busy() { inner.changed.notified().await } } => {}
                }
            }
            let why = format!("it reached its lifetime cap of {}", format_duration(inner.spec.max_life));
            s.close_because(&why).await;
            return;
        }
        if !busy && now >= idle_end && !s.is_busy() && s.last_active() == last {
            let why = format!("idle for {}", format_duration(inner.spec.idle_timeout));
            s.close_because(&why).await;
            return;
        }
    }
}

impl Session {
    fn is_busy(&self) -> bool {
        self.inner.state.lock().map(|s| s.busy).unwrap_or(false)
    }

    fn last_active(&self) -> Instant {
        self.inner.state.lock().map(|s| s.last_active).unwrap_or_else(|_| Instant::now())
    }
}

/// One call, as the runner drives it.
struct Call {
    session: Session,
    call: u32,
    cut_to_cap: bool,
}

impl runner::Target for Call {
    fn name(&self) -> String {
        self.session.inner.tier.clone()
    }

    fn check_limits(&self, _limits: &Limits) -> Result<(), String> {
        // Checked against the tier when the session was opened; a call's
        // limits are at most the session's.
        Ok(())
    }

    fn check_secrets(&self, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
        if secrets.is_empty() {
            return Ok(());
        }
        Err("a session is offline (no egress proxy), so it cannot use secrets: run without a session".into())
    }

    fn session(&self) -> Option<SessionRef> {
        Some(SessionRef { id: self.session.inner.id.clone(), call: self.call })
    }

    fn run(self: Arc<Self>, spec: RunSpec, ctx: RunContext) -> BoxFuture<'static, anyhow::Result<TierExit>> {
        Box::pin(async move {
            let inner = self.session.inner.clone();
            let _held = inner.gate.clone().lock_owned().await;
            if self.cut_to_cap {
                ctx.note(format!(
                    "session {}: wall time cut to {} — what is left of the session's lifetime cap",
                    inner.id,
                    format_duration(spec.limits.wall_time)
                ))
                .await;
            }
            let closed = inner.state.lock().map(|s| s.closed.clone()).unwrap_or(None);
            let result = match closed {
                // Closed between start and here: the call never ran.
                Some(why) => Err(anyhow::anyhow!("session {} was closed before the call ran ({why})", inner.id)),
                None => inner.ts.run(spec, ctx).await,
            };
            let dead = !inner.ts.alive();
            if let Ok(mut st) = inner.state.lock() {
                st.busy = false;
                st.current = None;
                st.last_active = Instant::now();
            }
            inner.changed.notify_one();
            let mut result = result;
            if let Ok(x) = &mut result {
                let facts = serde_json::json!({ "id": inner.id, "call": self.call });
                match x.details.as_object_mut() {
                    Some(o) => {
                        o.insert("session".into(), facts);
                    }
                    None => x.details = serde_json::json!({ "session": facts }),
                }
            }
            if dead {
                // Closed in the background: this call's report goes out now.
                let s = self.session.clone();
                let why = died(&*inner.ts);
                tokio::spawn(async move { s.close_because(&why).await });
            }
            result
        })
    }
}

/// Counters of a call: the sandbox's kernel counters since the call began.
/// A session's counters run for its whole life; each call is judged on its
/// own share.
pub fn counters_since(now: crate::judge::Counters, base: crate::judge::Counters) -> crate::judge::Counters {
    let d = |n: Option<u64>, b: Option<u64>| n.map(|n| n.saturating_sub(b.unwrap_or(0)));
    crate::judge::Counters {
        cpu_ms: d(now.cpu_ms, base.cpu_ms),
        oom_kills: d(now.oom_kills, base.oom_kills),
        memory_limit_hits: d(now.memory_limit_hits, base.memory_limit_hits),
        pids_refused: d(now.pids_refused, base.pids_refused),
    }
}

/// What the README and `list_tiers` say is per call.
pub fn per_call_limits() -> &'static str {
    PER_CALL
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, ExitStatus, Phase, Stream};
    use crate::report::Outcome;
    use crate::spec::Language;
    use crate::tier::contract::{Availability, BoxFuture};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A tier whose "sandbox" is a map of files, to test the session
    /// machinery without any real isolation (the tiers' own tests do that).
    struct FakeTier {
        closes: Arc<AtomicU32>,
        /// How long building and tearing down a sandbox takes.
        delay: Duration,
    }

    struct FakeSession {
        files: Mutex<HashMap<String, String>>,
        closes: Arc<AtomicU32>,
        delay: Duration,
    }

    impl Tier for FakeTier {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn describe(&self) -> &'static str {
            "fake"
        }
        fn probe(&self) -> BoxFuture<'_, Availability> {
            Box::pin(async {
                Availability { tier: "fake".into(), available: true, summary: "".into(), checks: vec![] }
            })
        }
        fn run(&self, _: RunSpec, _: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async { anyhow::bail!("no") })
        }
        fn sessions(&self) -> Result<(), String> {
            Ok(())
        }
        fn open_session(&self, _: SessionSpec) -> BoxFuture<'_, anyhow::Result<Arc<dyn TierSession>>> {
            let closes = self.closes.clone();
            let delay = self.delay;
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(Arc::new(FakeSession { files: Default::default(), closes, delay }) as Arc<dyn TierSession>)
            })
        }
    }

    impl TierSession for FakeSession {
        // Programs: "write K V", "read K", "sleep MS".
        fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
            Box::pin(async move {
                ctx.emit(EventKind::Phase(Phase::Running)).await;
                let w: Vec<&str> = spec.code.split_whitespace().collect();
                match w.as_slice() {
                    ["write", k, v] => {
                        self.files.lock().unwrap().insert(k.to_string(), v.to_string());
                    }
                    ["read", k] => {
                        let v = self.files.lock().unwrap().get(*k).cloned().unwrap_or_default();
                        ctx.emit(EventKind::Output(Stream::Stdout, v.into_bytes())).await;
                    }
                    ["sleep", ms] => {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())) => {}
                            _ = ctx.stop.cancelled() => {}
                        }
                    }
                    _ => {}
                }
                ctx.emit(EventKind::Exit(ExitStatus { code: Some(0), signal: None })).await;
                ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
                Ok(TierExit { usage: None, details: serde_json::json!({"start": "session"}) })
            })
        }
        fn close(&self) -> BoxFuture<'_, ()> {
            Box::pin(async move {
                tokio::time::sleep(self.delay).await;
                self.closes.fetch_add(1, Ordering::SeqCst);
            })
        }
    }

    fn open(spec: SessionSpec) -> (impl std::future::Future<Output = anyhow::Result<Session>>, Arc<AtomicU32>) {
        let closes = Arc::new(AtomicU32::new(0));
        let tier: Arc<dyn Tier> = Arc::new(FakeTier { closes: closes.clone(), delay: Duration::ZERO });
        (Session::open(tier, spec), closes)
    }

    /// Set when dropped, and whether the sandbox was closed by then.
    struct Witness(Arc<AtomicU32>, Arc<Mutex<Option<u32>>>);

    impl Drop for Witness {
        fn drop(&mut self) {
            *self.1.lock().unwrap() = Some(self.0.load(Ordering::SeqCst));
        }
    }

    #[tokio::test]
    async fn a_hold_lasts_until_the_sandbox_is_gone_even_when_the_opener_gives_up() {
        let closes = Arc::new(AtomicU32::new(0));
        let delay = Duration::from_millis(300);
        let tier: Arc<dyn Tier> = Arc::new(FakeTier { closes: closes.clone(), delay });
        let seen = Arc::new(Mutex::new(None));
        // The opener gives up while the sandbox is being built.
        let opening = Session::open_holding(
            tier.clone(),
            SessionSpec::new(Limits::default()),
            Box::new(Witness(closes.clone(), seen.clone())),
        );
        assert!(tokio::time::timeout(Duration::from_millis(50), opening).await.is_err());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(*seen.lock().unwrap(), None, "still being built: the hold is kept");
        tokio::time::timeout(Duration::from_secs(10), async {
            while seen.lock().unwrap().is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the hold goes once the sandbox is gone");
        assert_eq!(*seen.lock().unwrap(), Some(1), "dropped only after the sandbox was closed");

        // An open session keeps it until it is closed and torn down.
        let seen = Arc::new(Mutex::new(None));
        let s = Session::open_holding(
            tier,
            SessionSpec::new(Limits::default()),
            Box::new(Witness(closes.clone(), seen.clone())),
        )
        .await
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), None);
        s.close().await;
        assert_eq!(*seen.lock().unwrap(), Some(2));
    }

    fn prog(code: &str) -> RunSpec {
        RunSpec::new(Language::Sh, code)
    }

    #[tokio::test]
    async fn calls_share_the_sandbox_and_reports_name_session_and_call() {
        let (s, closes) = open(SessionSpec::new(Limits::default()));
        let s = s.await.unwrap();
        assert!(s.id().starts_with("s-") && s.id().len() == 14, "{}", s.id());
        let r1 = s.run(prog("write a hello")).await.unwrap();
        let r2 = s.run(prog("read a")).await.unwrap();
        assert_eq!(r2.stdout, "hello");
        assert_eq!(r1.session, Some(SessionRef { id: s.id().into(), call: 1 }));
        assert_eq!(r2.session.as_ref().unwrap().call, 2);
        assert_eq!(r2.details["session"]["call"], 2);
        assert_eq!(s.info().calls, 2);
        assert!(open_ids().contains(&s.id().to_string()));
        s.close().await;
        s.close().await;
        assert_eq!(closes.load(Ordering::SeqCst), 1, "closed exactly once");
        assert!(!open_ids().contains(&s.id().to_string()));
        let e = s.start(prog("read a")).err().unwrap();
        assert!(matches!(e, CallError::Closed { .. }) && e.to_string().contains("closed by its user"), "{e}");
    }

    #[tokio::test]
    async fn one_call_at_a_time_and_close_cancels_the_running_one() {
        let (s, closes) = open(SessionSpec::new(Limits::default()));
        let s = s.await.unwrap();
        let mut h = s.start(prog("sleep 60000")).unwrap();
        assert!(matches!(s.start(prog("read a")), Err(CallError::Busy(_))));
        // Close once the program runs.
        while let Some(u) = h.events.recv().await {
            if matches!(u, runner::Update::Event(crate::event::RunEvent { kind: EventKind::Phase(Phase::Running), .. }))
            {
                break;
            }
        }
        let closing = s.clone();
        let c = tokio::spawn(async move { closing.close().await });
        let r = h.report().await;
        assert_eq!(r.outcome, Outcome::Cancelled);
        c.await.unwrap();
        assert_eq!(closes.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn per_call_limits_may_only_be_lowered_and_sandbox_limits_are_the_sessions() {
        let session = Limits { memory_bytes: 128 << 20, ..Limits::default() };
        let mut call = Limits { wall_time: Duration::from_secs(2), memory_bytes: 1 << 30, ..Limits::default() };
        let l = call_limits(&session, &call).unwrap();
        assert_eq!(l.wall_time, Duration::from_secs(2));
        assert_eq!(l.memory_bytes, 128 << 20, "memory is the session's");
        call.cpu_time = Duration::from_secs(60);
        let e = call_limits(&session, &call).unwrap_err();
        assert!(e.contains("cpu_time 60s is above this session's 5s"), "{e}");
    }

    #[tokio::test]
    async fn idle_sessions_close_and_the_cap_cuts_a_call() {
        let spec = SessionSpec { idle_timeout: Duration::from_millis(200), ..SessionSpec::new(Limits::default()) };
        let (s, closes) = open(spec);
        let s = s.await.unwrap();
        tokio::time::timeout(Duration::from_secs(20), s.gone().cancelled()).await.expect("closed when idle");
        assert_eq!(closes.load(Ordering::SeqCst), 1);
        assert!(s.info().closed.unwrap().contains("idle"));

        let spec = SessionSpec { max_life: Duration::from_millis(300), ..SessionSpec::new(Limits::default()) };
        let (s, _) = open(spec);
        let s = s.await.unwrap();
        let r = s.run(prog("sleep 60000")).await.unwrap();
        assert!(r.limits.wall_time <= Duration::from_millis(300), "{:?}", r.limits.wall_time);
        assert!(r.has_violation(crate::event::ViolationKind::WallTimeout), "{r:?}");
        tokio::time::timeout(Duration::from_secs(30), s.gone().cancelled()).await.expect("closed at its cap");
        assert!(s.info().closed.unwrap().contains("lifetime cap"));
    }

    #[test]
    fn a_calls_counters_are_its_own_share() {
        use crate::judge::Counters;
        let base = Counters { cpu_ms: Some(900), oom_kills: Some(1), memory_limit_hits: None, pids_refused: Some(3) };
        let now =
            Counters { cpu_ms: Some(1000), oom_kills: Some(1), memory_limit_hits: Some(2), pids_refused: Some(5) };
        let c = counters_since(now, base);
        assert_eq!(
            c,
            Counters { cpu_ms: Some(100), oom_kills: Some(0), memory_limit_hits: Some(2), pids_refused: Some(2) }
        );
    }
}
