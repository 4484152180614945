//! Warm starts: guests booted ahead of time, each waiting in its agent with
//! the interpreter resident. Single use: a guest is taken out of the pool for
//! one run and killed after it. Refilled in the background, one boot at a
//! time (boots under TCG are CPU-heavy; two at once only slow each other),
//! from the snapshot when restoring is faster than booting; a guest taken
//! while others still wait is replaced once its run is over, not beside it
//! (see [`Pool::take`]). Once the pool is full, its guests are warmed up
//! one at a time by a call of sandbench's own (see [`warm_up`]); a pool that
//! demand keeps drained hands out guests as soon as they are booted.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::artefacts::Paths;
use super::snapshot::{self, BOOT_TIMEOUT};
use super::vm::{self, Boot, Guest, Shape, WaitEnd};
use crate::config::MicrovmConfig;

/// Give up refilling after this many boots in a row failed.
const MAX_FAILURES: u32 = 3;

/// The longest a refill waits for the run that took a guest (a session
/// holds its guest far longer than a run; the pool is not left short for
/// that long).
const REFILL_DEFER_MAX: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) struct Pool {
    cfg: MicrovmConfig,
    paths: Paths,
    pub shape: Shape,
    pub size: usize,
    state: Mutex<State>,
    changed: Notify,
    /// [`REFILL_DEFER_MAX`] (a field so tests can tell the run's end from it).
    refill_defer: std::time::Duration,
}

#[derive(Default)]
struct State {
    ready: Vec<(Guest, &'static str)>,
    booting: bool,
    /// The refill task, aborted by a drain: dropping its guest in flight
    /// kills that QEMU at once instead of waiting out a boot.
    refiller: Option<tokio::task::AbortHandle>,
    failures: u32,
    last_error: Option<String>,
    /// Warm-ups that failed in a row; at [`MAX_FAILURES`] guests are no
    /// longer warmed up (they are handed out as booted, as before).
    warm_failures: u32,
}

impl State {
    /// Work for the refill task: a guest to boot, or one to warm up.
    fn wants(&self, size: usize) -> bool {
        (self.ready.len() < size && self.failures < MAX_FAILURES)
            || (self.warm_failures < MAX_FAILURES && self.ready.iter().any(|(g, _)| !g.warmed_up))
    }
}

/// The runtime pool guests are booted on. A guest's channel and console
/// readers are tasks of the runtime that spawned it, and a pooled guest
/// outlives the call that asked for a refill: booted on that caller's
/// runtime, it would lose its channel when that runtime ends (a program sent
/// to it would meet "the guest died" at once). One process-wide runtime that
/// lives as long as the pool does.
fn pool_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sandbench-microvm-pool")
            .enable_all()
            .build()
            .map_err(|e| tracing::warn!("microvm pool: no runtime of its own ({e}); no warm guests"))
            .ok()
    })
    .as_ref()
}

fn registry() -> &'static Mutex<Option<Arc<Pool>>> {
    static P: OnceLock<Mutex<Option<Arc<Pool>>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

impl Pool {
    /// Create (or return) the process-wide pool for this shape, replacing one
    /// of another shape. Only long-lived sessions do this (`prewarm`): a
    /// one-shot `sandbench run` would only pay for boots it never uses.
    pub(crate) fn activate(cfg: &MicrovmConfig, paths: &Paths, shape: Shape) -> Option<Arc<Pool>> {
        if cfg.pool_size == 0 {
            return None;
        }
        let mut r = registry().lock().ok()?;
        if let Some(p) = r.as_ref() {
            if p.shape == shape {
                return Some(p.clone());
            }
        }
        let p = Arc::new(Pool {
            cfg: cfg.clone(),
            paths: paths.clone(),
            shape,
            size: cfg.pool_size,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            refill_defer: REFILL_DEFER_MAX,
        });
        *r = Some(p.clone());
        Some(p)
    }

    /// The current process-wide pool, if any.
    pub(crate) fn current() -> Option<Arc<Pool>> {
        registry().lock().ok()?.clone()
    }

    /// A ready guest that fits `need`, if there is one. Starts a refill.
    pub(crate) fn take(self: &Arc<Self>, need: Shape) -> Option<(Guest, &'static str)> {
        let fits = need.accel == self.shape.accel && need.cpus == self.shape.cpus && need.mem_mib <= self.shape.mem_mib;
        if !fits {
            return None;
        }
        let (got, left) = {
            let mut st = self.state.lock().ok()?;
            // A dead pool guest is dropped (kill_on_drop reaps it).
            st.ready.retain_mut(|(g, _)| g.alive() && g.channel_open());
            // A warmed-up guest first: it answers a run several times faster.
            let i = st.ready.iter().rposition(|(g, _)| g.warmed_up).or(st.ready.len().checked_sub(1));
            (i.map(|i| st.ready.remove(i)), st.ready.len())
        };
        match got {
            Some((mut g, how)) if left > 0 => {
                let ended = CancellationToken::new();
                g.ended = Some(ended.clone().drop_guard());
                self.refill_after(ended);
                Some((g, how))
            }
            got => {
                self.refill();
                got
            }
        }
    }

    /// Refill once the run that took a guest is over (its guest dropped),
    /// or after [`REFILL_DEFER_MAX`]. A refill under TCG is a snapshot's
    /// 256 MiB restore and then an emulated warm-up call: started beside the
    /// run, it made a `print(1)` run take 97–103 ms p50 against 57–62 ms
    /// after (`bench --tier microvm --path session`, runs alternated). Not
    /// a matter of CPU time: the refill's QEMU at nice 19 left the run as
    /// slow; the two share the host's caches and memory bandwidth. Only
    /// while the pool still holds a guest: the next run is served either
    /// way, and a burst that empties the pool refills at once.
    fn refill_after(self: &Arc<Self>, ended: CancellationToken) {
        let Some(rt) = pool_runtime() else { return self.refill() };
        let me = self.clone();
        rt.spawn(async move {
            tokio::select! {
                _ = ended.cancelled() => {}
                _ = tokio::time::sleep(me.refill_defer) => {}
            }
            me.refill();
        });
    }

    /// Guests waiting and the resident memory (PSS) of their QEMU processes.
    pub(crate) fn held(self: &Arc<Self>) -> (usize, u64) {
        let (pids, dropped) = match self.state.lock() {
            Ok(mut s) => {
                // What is shown is what runs: a guest whose QEMU died (killed
                // by anything) is dropped here, not only at the next take.
                let before = s.ready.len();
                s.ready.retain_mut(|(g, _)| g.alive() && g.channel_open());
                let pids: Vec<i32> = s.ready.iter().filter_map(|(g, _)| g.pid()).map(|p| p as i32).collect();
                (pids, before - s.ready.len())
            }
            Err(_) => (vec![], 0),
        };
        if dropped > 0 {
            tracing::info!("microvm pool: {dropped} guest(s) gone outside sandbench; refilling");
            self.refill();
        }
        (pids.len(), crate::host::pss_bytes(&pids))
    }

    /// The QEMU pids of the guests held now.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.state.lock().map(|s| s.ready.iter().filter_map(|(g, _)| g.pid()).collect()).unwrap_or_default()
    }

    /// Boot guests in the background until the pool is full.
    pub(crate) fn refill(self: &Arc<Self>) {
        {
            let Ok(mut st) = self.state.lock() else { return };
            if st.booting || !st.wants(self.size) {
                return;
            }
            st.booting = true;
        }
        let Some(rt) = pool_runtime() else {
            if let Ok(mut st) = self.state.lock() {
                st.booting = false;
                st.failures = MAX_FAILURES;
                st.last_error = Some("cannot start the pool's runtime".into());
            }
            return;
        };
        let me = self.clone();
        let task = rt.spawn(async move {
            loop {
                // Boot while the pool is short; warm up only a full pool's
                // guests, so that a burst of runs gets booted guests at once
                // and never waits behind a warm-up.
                let warm = {
                    let Ok(mut st) = me.state.lock() else { return };
                    if st.ready.len() < me.size && st.failures < MAX_FAILURES {
                        None
                    } else if !st.wants(me.size) {
                        st.booting = false;
                        return;
                    } else {
                        let i = st.ready.iter().position(|(g, _)| !g.warmed_up);
                        i.map(|i| st.ready.remove(i))
                    }
                };
                match warm {
                    None => {
                        let r = boot_ready(&me.cfg, &me.paths, me.shape).await;
                        let Ok(mut st) = me.state.lock() else { return };
                        match r {
                            Ok(g) => {
                                st.failures = 0;
                                st.ready.push(g);
                            }
                            Err(e) => {
                                tracing::warn!("microvm pool: boot failed: {e:#}");
                                st.failures += 1;
                                st.last_error = Some(format!("{e:#}"));
                            }
                        }
                    }
                    Some((mut g, how)) => {
                        match warm_up(&mut g).await {
                            Ok(()) => {
                                let Ok(mut st) = me.state.lock() else { return };
                                st.warm_failures = 0;
                                st.ready.push((g, how));
                            }
                            Err(e) => {
                                // The loop boots its replacement.
                                tracing::warn!("microvm pool: a guest's warm-up failed: {e:#}");
                                g.kill().await;
                                let Ok(mut st) = me.state.lock() else { return };
                                st.warm_failures += 1;
                            }
                        }
                    }
                }
                me.changed.notify_waiters();
            }
        });
        if let Ok(mut st) = self.state.lock() {
            st.refiller = Some(task.abort_handle());
        }
    }

    /// Fill the pool and wait until it is full and its guests warmed up (or
    /// refilling gave up; warm-ups that keep failing leave them as booted).
    pub(crate) async fn fill(self: &Arc<Self>) -> anyhow::Result<usize> {
        {
            if let Ok(mut st) = self.state.lock() {
                st.failures = 0;
                st.warm_failures = 0;
            }
        }
        loop {
            let notified = self.changed.notified();
            self.refill();
            {
                let st = self.state.lock().map_err(|_| anyhow::anyhow!("pool lock poisoned"))?;
                if st.ready.len() >= self.size && !st.wants(self.size) {
                    return Ok(st.ready.len());
                }
                if st.failures >= MAX_FAILURES {
                    anyhow::bail!("cannot boot pool guests: {}", st.last_error.clone().unwrap_or_default());
                }
            }
            notified.await;
        }
    }

    /// Kill every pooled guest, and the one booting, and close the pool
    /// until the next `fill` (a drain is for shutdown and tests).
    pub(crate) async fn drain(&self) {
        let guests: Vec<_> = match self.state.lock() {
            Ok(mut st) => {
                st.failures = MAX_FAILURES; // no refill until fill() reopens
                if let Some(t) = st.refiller.take() {
                    t.abort();
                }
                st.booting = false;
                st.ready.drain(..).collect()
            }
            Err(_) => vec![],
        };
        for (g, _) in guests {
            g.kill().await;
        }
        self.changed.notify_waiters();
    }
}

/// What a pooled guest runs once before it joins the pool: sandbench's own
/// code, which removes its file, so the next call finds `/work` as a fresh
/// guest has it.
const WARM_UP: &str = "import os\nos.unlink('/work/main.py')\n";

/// How long the warm-up call may take (a first call under TCG on a loaded
/// machine takes seconds; it is off every run's path).
const WARM_UP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Under TCG a guest's first call pays for translating every code path it
/// takes (the agent's Python, the guest kernel's fork, cgroup and mount
/// paths, the interpreter) into host code; a restored snapshot starts with
/// none of that (QEMU's translation cache is not guest state). A fresh warm
/// run, the guest's first call, took ~550 ms where a session's next call
/// takes ~55 ms. So a guest runs one call of sandbench's own first, as a
/// session call with the default limits (a run with those then has nothing
/// to reconfigure): the agent treats the program that follows as it treats
/// a session's next call, in a new process made after this one's exit,
/// its counters taken from the call's own start. Then a ping, answered once
/// the agent has made that process and waits again.
async fn warm_up(g: &mut Guest) -> anyhow::Result<()> {
    use super::proto::{self, Frame, Item};
    use crate::spec::{Language, Limits, RunSpec};
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    let req = proto::RunRequest {
        language: Language::Python.name().into(),
        file: "main.py".into(),
        code: WARM_UP.into(),
        env: RunSpec::new(Language::Python, WARM_UP).sandbox_env("/work", "/tmp"),
        limits: super::exec::guest_limits(&Limits::default()),
        seed: anyhow::Context::context(crate::host::random_hex(32), "cannot read /dev/urandom for the guest's seed")?,
        now,
        net_port: None,
        ca: None,
        session_since: Some(now),
        argv: vec![],
    };
    let deadline = tokio::time::Instant::now() + WARM_UP_TIMEOUT;
    g.send(&proto::encode_run(&req)).await?;
    let mut pinged = false;
    loop {
        let item = match tokio::time::timeout_at(deadline, g.next()).await {
            Err(_) => anyhow::bail!("the guest's warm-up call did not end within {} s", WARM_UP_TIMEOUT.as_secs()),
            Ok(None) => anyhow::bail!("the guest died during its warm-up call"),
            Ok(Some(item)) => item,
        };
        match item {
            Item::Frame(Frame::Exit(x)) if !pinged => {
                if x.code != Some(0) || x.signal.is_some() || x.refused.is_some() {
                    anyhow::bail!("the guest's warm-up call failed (exit {:?}, signal {:?})", x.code, x.signal);
                }
                vm::ping(g).await?;
                pinged = true;
            }
            Item::Frame(Frame::Pong) if pinged => {
                g.warmed_up = true;
                return Ok(());
            }
            // Its output, usage and notes are sandbench's own, not a run's.
            _ => {}
        }
    }
}

/// Boot one guest to the point where its agent waits for a program: from
/// the snapshot when that is faster, else cold. Returns how it was booted.
pub(crate) async fn boot_ready(cfg: &MicrovmConfig, p: &Paths, shape: Shape) -> anyhow::Result<(Guest, &'static str)> {
    let never = CancellationToken::new();
    let snap = if cfg.snapshot { snapshot::load(cfg, p, shape).filter(|(_, m)| m.faster_than_boot()) } else { None };
    if let Some((state, _)) = snap {
        let mut g = Guest::spawn(&cfg.qemu, p, shape, Boot::Restore(&state), false)?;
        vm::ping(&mut g).await?;
        match g.wait_for(true, BOOT_TIMEOUT, &never).await {
            Ok(WaitEnd::Ready) => return Ok((g, "snapshot")),
            Ok(WaitEnd::Stopped) => anyhow::bail!("stopped"),
            Err(e) => {
                tracing::warn!("microvm: restore failed, booting cold: {e:#}");
                g.kill().await;
            }
        }
    }
    let mut g = Guest::spawn(&cfg.qemu, p, shape, Boot::Cold(None), false)?;
    match g.wait_for(false, BOOT_TIMEOUT, &never).await {
        Ok(_) => Ok((g, "cold")),
        Err(e) => {
            g.kill().await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A pool of two holding `guests`, whose "QEMU" is a script that holds
    /// its pipes open and never says READY: the pool's bookkeeping is under
    /// test, not a guest (a refill's boot just waits until the drain).
    fn fake_pool(dir: &std::path::Path, guests: usize, defer: Duration) -> Arc<Pool> {
        use std::os::unix::fs::PermissionsExt;
        let size = 2;
        let qemu = dir.join("fake-qemu");
        std::fs::write(&qemu, "#!/bin/sh\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut paths = super::super::artefacts::paths();
        paths.snapshots = dir.join("snapshots");
        paths.runs = dir.join("runs");
        let cfg = MicrovmConfig {
            qemu: qemu.to_string_lossy().into_owned(),
            snapshot: false,
            pool_size: size,
            ..Default::default()
        };
        let pool = Arc::new(Pool {
            cfg,
            paths,
            shape: Shape { mem_mib: 256, cpus: 1, accel: vm::Accel::Tcg },
            size,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            refill_defer: defer,
        });
        for _ in 0..guests {
            let g = Guest::spawn(&pool.cfg.qemu, &pool.paths, pool.shape, Boot::Cold(None), false).unwrap();
            pool.state.lock().unwrap().ready.push((g, "snapshot"));
        }
        pool
    }

    fn booting(pool: &Pool) -> bool {
        pool.state.lock().unwrap().booting
    }

    async fn wait_booting(pool: &Pool) -> bool {
        for _ in 0..500 {
            if booting(pool) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_refill_waits_for_the_end_of_the_run_that_took_a_guest() {
        let dir = tempfile::tempdir().unwrap();
        let pool = fake_pool(dir.path(), 2, Duration::from_secs(600));
        let (g, _) = pool.take(pool.shape).expect("a pooled guest");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!booting(&pool), "the refill started beside the run while the pool still held a guest");
        drop(g); // the run is over
        assert!(wait_booting(&pool).await, "the run ended and the pool did not refill");
        pool.drain().await;
    }

    #[tokio::test]
    async fn the_last_guest_taken_refills_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let pool = fake_pool(dir.path(), 1, Duration::from_secs(600));
        let held = pool.take(pool.shape).expect("a pooled guest");
        assert!(booting(&pool), "an emptied pool must refill at once (a burst needs its guests)");
        drop(held);
        pool.drain().await;
    }

    #[tokio::test]
    async fn a_guest_held_long_leaves_the_pool_short_no_longer_than_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let pool = fake_pool(dir.path(), 2, Duration::from_millis(100));
        let held = pool.take(pool.shape).expect("a pooled guest");
        assert!(wait_booting(&pool).await, "a session holding its guest kept the pool short");
        drop(held);
        pool.drain().await;
    }
}
