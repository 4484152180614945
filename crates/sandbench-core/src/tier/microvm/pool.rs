//! Warm starts: guests booted ahead of time, each waiting in its agent with
//! the interpreter resident. Single use: a guest is taken out of the pool for
//! one run and killed after it. Refilled in the background, one boot at a
//! time (boots under TCG are CPU-heavy; two at once only slow each other),
//! from the snapshot when restoring is faster than booting.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::artefacts::Paths;
use super::snapshot::{self, BOOT_TIMEOUT};
use super::vm::{self, Boot, Guest, Shape, WaitEnd};
use crate::config::MicrovmConfig;

/// Give up refilling after this many boots in a row failed.
const MAX_FAILURES: u32 = 3;

pub(crate) struct Pool {
    cfg: MicrovmConfig,
    paths: Paths,
    pub shape: Shape,
    pub size: usize,
    state: Mutex<State>,
    changed: Notify,
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
        let got = {
            let mut st = self.state.lock().ok()?;
            let mut got = None;
            while let Some((mut g, how)) = st.ready.pop() {
                if g.alive() && g.channel_open() {
                    got = Some((g, how));
                    break;
                }
                // A dead pool guest is dropped (kill_on_drop reaps it).
            }
            got
        };
        self.refill();
        got
    }

    /// Guests waiting and the resident memory (PSS) of their QEMU processes.
    pub(crate) fn held(&self) -> (usize, u64) {
        let pids: Vec<i32> = self
            .state
            .lock()
            .map(|s| s.ready.iter().filter_map(|(g, _)| g.pid()).map(|p| p as i32).collect())
            .unwrap_or_default();
        (pids.len(), crate::host::pss_bytes(&pids))
    }

    /// Boot guests in the background until the pool is full.
    pub(crate) fn refill(self: &Arc<Self>) {
        {
            let Ok(mut st) = self.state.lock() else { return };
            if st.booting || st.ready.len() >= self.size || st.failures >= MAX_FAILURES {
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
                let r = boot_ready(&me.cfg, &me.paths, me.shape).await;
                let done = {
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
                    let done = st.ready.len() >= me.size || st.failures >= MAX_FAILURES;
                    if done {
                        st.booting = false;
                    }
                    done
                };
                me.changed.notify_waiters();
                if done {
                    return;
                }
            }
        });
        if let Ok(mut st) = self.state.lock() {
            st.refiller = Some(task.abort_handle());
        }
    }

    /// Fill the pool and wait until it is full (or refilling gave up).
    pub(crate) async fn fill(self: &Arc<Self>) -> anyhow::Result<usize> {
        {
            if let Ok(mut st) = self.state.lock() {
                st.failures = 0;
            }
        }
        loop {
            let notified = self.changed.notified();
            self.refill();
            {
                let st = self.state.lock().map_err(|_| anyhow::anyhow!("pool lock poisoned"))?;
                if st.ready.len() >= self.size {
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
