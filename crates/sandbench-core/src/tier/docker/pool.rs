//! Warm pool: containers created and started ahead of time, with the same
//! hardened shape a cold run gets, their resident loader already waiting on
//! stdin. Single use — a container runs one program and is removed — and
//! refilled in the background. Sized by `[docker] pool_size`; drained at exit
//! (`tier::shutdown`), and reaped by the next start if sandbench was killed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::container::Shape;
use super::engine::Engine;

struct State {
    /// The shape the pool keeps containers of (the last one asked for).
    shape: Option<Shape>,
    ready: VecDeque<String>,
    filling: usize,
    closed: bool,
    /// Consecutive failures; the pool stops refilling after a few until the
    /// next take or want.
    failures: u32,
    last_error: Option<String>,
}

pub(crate) struct Pool {
    engine: Engine,
    size: usize,
    tier: &'static str,
    state: Mutex<State>,
    changed: Notify,
    /// One drain at a time; a second waits for the first to finish.
    draining: tokio::sync::Mutex<()>,
}

const MAX_FAILURES: u32 = 3;

fn registry() -> &'static Mutex<Vec<Arc<Pool>>> {
    static R: std::sync::OnceLock<Mutex<Vec<Arc<Pool>>>> = std::sync::OnceLock::new();
    R.get_or_init(|| Mutex::new(vec![]))
}

/// Drain every pool of this process (called once at exit). Pools stay
/// registered until drained, so a tier dropped early leaves nothing behind.
pub(crate) async fn drain_all() {
    let pools: Vec<Arc<Pool>> = std::mem::take(&mut *registry().lock().unwrap_or_else(|e| e.into_inner()));
    futures_util::future::join_all(pools.iter().map(|p| p.drain())).await;
}

/// Drain one pool in the background and forget it (its tier was dropped).
pub(crate) fn release(pool: Arc<Pool>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    rt.spawn(async move {
        pool.drain().await;
        registry().lock().unwrap_or_else(|e| e.into_inner()).retain(|p| !Arc::ptr_eq(p, &pool));
    });
}

impl Pool {
    pub(crate) fn new(engine: Engine, size: usize, tier: &'static str) -> Arc<Pool> {
        let p = Arc::new(Pool {
            engine,
            size,
            tier,
            state: Mutex::new(State {
                shape: None,
                ready: VecDeque::new(),
                filling: 0,
                closed: false,
                failures: 0,
                last_error: None,
            }),
            changed: Notify::new(),
            draining: tokio::sync::Mutex::new(()),
        });
        registry().lock().unwrap_or_else(|e| e.into_inner()).push(p.clone());
        p
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep containers of `shape` ready from now on. Containers of another
    /// shape are removed.
    pub(crate) fn want(self: &Arc<Self>, shape: &Shape) {
        let stale: Vec<String> = {
            let mut st = self.lock();
            if st.closed || self.size == 0 {
                return;
            }
            if st.shape.as_ref() == Some(shape) {
                vec![]
            } else {
                st.shape = Some(shape.clone());
                st.failures = 0;
                st.ready.drain(..).collect()
            }
        };
        if !stale.is_empty() {
            // Counted as in flight, so that a drain waits for them.
            self.lock().filling += 1;
            let me = self.clone();
            tokio::spawn(async move {
                futures_util::future::join_all(stale.iter().map(|id| super::lifecycle::remove(&me.engine.docker, id)))
                    .await;
                me.lock().filling -= 1;
                me.changed.notify_waiters();
                me.refill();
            });
        }
        self.refill();
    }

    /// A ready container of `shape`, if there is one. Does not refill: the
    /// caller calls `want` once its run is over, so that creating the next
    /// container never competes with the run for the daemon and the CPU.
    pub(crate) fn take(self: &Arc<Self>, shape: &Shape) -> Option<String> {
        let got = {
            let mut st = self.lock();
            st.failures = 0;
            if st.shape.as_ref() == Some(shape) {
                st.ready.pop_front()
            } else {
                None
            }
        };
        got
    }

    fn refill(self: &Arc<Self>) {
        loop {
            let shape = {
                let mut st = self.lock();
                let Some(shape) = st.shape.clone() else {
                    return;
                };
                if st.closed || st.failures >= MAX_FAILURES || st.ready.len() + st.filling >= self.size {
                    return;
                }
                st.filling += 1;
                shape
            };
            let me = self.clone();
            tokio::spawn(async move {
                let run_id = format!("warm-{}", super::container::new_run_id());
                let r = super::lifecycle::launch(&me.engine, &shape, &run_id, me.tier).await;
                let extra = {
                    let mut st = me.lock();
                    st.filling -= 1;
                    match r {
                        Ok(id) if !st.closed && st.shape.as_ref() == Some(&shape) => {
                            st.failures = 0;
                            st.ready.push_back(id);
                            None
                        }
                        Ok(id) => Some(id),
                        Err(e) => {
                            st.failures += 1;
                            tracing::warn!("warm pool ({}): {e:#}", me.tier);
                            st.last_error = Some(format!("{e:#}"));
                            None
                        }
                    }
                };
                if let Some(id) = extra {
                    super::lifecycle::remove(&me.engine.docker, &id).await;
                }
                me.changed.notify_waiters();
                me.refill();
            });
        }
    }

    /// Wait until the pool is full again (or cannot fill, or is closed).
    pub(crate) async fn settle(&self) {
        loop {
            let notified = self.changed.notified();
            {
                let st = self.lock();
                let full = st.ready.len() >= self.size;
                if st.shape.is_none() || st.closed || full || (st.filling == 0 && st.failures > 0) {
                    return;
                }
            }
            notified.await;
        }
    }

    pub(crate) fn ready(&self) -> usize {
        self.lock().ready.len()
    }

    /// The containers waiting now.
    pub(crate) fn ready_ids(&self) -> Vec<String> {
        self.lock().ready.iter().cloned().collect()
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    /// Stop refilling and remove every container the pool holds, including
    /// ones still being created.
    pub(crate) async fn drain(&self) {
        let _one = self.draining.lock().await;
        self.lock().closed = true;
        loop {
            let notified = self.changed.notified();
            if self.lock().filling == 0 {
                break;
            }
            notified.await;
        }
        let ids: Vec<String> = self.lock().ready.drain(..).collect();
        let docker = &self.engine.docker;
        futures_util::future::join_all(ids.iter().map(|id| super::lifecycle::remove(docker, id))).await;
    }
}
