//! Warm pool: containers created and started ahead of time, with the same
//! hardened shape a cold run gets, their resident loader already waiting on
//! stdin. Single use — a container runs one program and is removed — and
//! refilled in the background. Sized by `[docker] pool_size`; drained at exit
//! (`tier::shutdown`), and reaped by the next start if sandbench was killed.
//!
//! What the pool holds is true when it is shown or handed out: a watch on
//! the engine's event stream (this process's containers only) drops a
//! container that died or was removed by anything else (`docker rm -f`, a
//! prune, an OOM, a daemon restart) the moment the engine says so, and the
//! pool refills. When the stream breaks (the engine restarted or went
//! away) the watch reconnects with backoff and first lists what still
//! runs, so nothing that died in between stays. A run that takes a
//! container checks it once more (see run.rs): the window between the
//! event and the take is closed there.

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
    /// Why the last ready container went before a run could take it
    /// (`removed outside sandbench`, …): the next run that starts cold
    /// because of it says so, once.
    dropped: Option<(String, String)>,
}

/// What a run got from the pool.
pub(crate) struct Taken {
    pub(crate) id: Option<String>,
    /// Why a container the pool had was gone before this take, if one was.
    pub(crate) gone: Option<String>,
}

pub(crate) struct Pool {
    engine: Engine,
    size: usize,
    tier: &'static str,
    state: Mutex<State>,
    changed: Notify,
    /// One drain at a time; a second waits for the first to finish.
    draining: tokio::sync::Mutex<()>,
    /// The engine-event watch (see the module's doc), ended by a drain.
    watch: Mutex<Option<tokio::task::AbortHandle>>,
}

const MAX_FAILURES: u32 = 3;

/// How long a drain waits for containers being made.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// One container being made (or stale ones being removed): counted in
/// `filling` while it lives and uncounted when it goes — also when its task
/// is dropped with the runtime it ran on (a front end's runtime that ended
/// first), so a drain never waits for work that no longer exists.
struct Filling(Arc<Pool>);

impl Filling {
    fn count(pool: &Arc<Pool>) -> Filling {
        pool.lock().filling += 1;
        Filling(pool.clone())
    }
}

impl Drop for Filling {
    fn drop(&mut self) {
        {
            let mut st = self.0.lock();
            st.filling = st.filling.saturating_sub(1);
        }
        self.0.changed.notify_waiters();
    }
}

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
                dropped: None,
            }),
            changed: Notify::new(),
            draining: tokio::sync::Mutex::new(()),
            watch: Mutex::new(None),
        });
        if size > 0 {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                // Weak: the watch must not keep a dropped tier's pool alive.
                // Its handle is stored before the pool is registered, so
                // every drain finds it.
                let task = rt.spawn(watch(Arc::downgrade(&p)));
                *p.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
            }
        }
        registry().lock().unwrap_or_else(|e| e.into_inner()).push(p.clone());
        p
    }

    /// Drop a ready container that is gone (or going) for a reason outside
    /// this pool, and refill. Containers the pool no longer holds (taken by
    /// a run, removed by a drain) are not its business.
    pub(crate) fn forget(self: &Arc<Self>, id: &str, why: &str) -> bool {
        let held = {
            let mut st = self.lock();
            let before = st.ready.len();
            st.ready.retain(|r| r != id);
            let held = st.ready.len() != before;
            if held {
                st.dropped = Some((id.to_string(), why.to_string()));
                // A member that dies before any run took it counts as a
                // failed fill: a shape whose containers cannot stay up (a
                // memory limit the loader does not fit in, a broken image)
                // stops the refills after a few, until the next take,
                // instead of making containers as fast as the engine can.
                st.failures += 1;
            } else if let Some((_, w)) = st.dropped.as_mut().filter(|(d, _)| d == id) {
                // Later events of the same container: its `die` after an
                // `oom`, the `destroy` of the removal below. The first
                // reason stands, except that an OOM says the most.
                if why == OOM {
                    *w = why.to_string();
                }
            }
            held
        };
        if held {
            tracing::info!("warm pool ({}): container {} gone: {why}", self.tier, super::lifecycle::short(id));
            let (docker, id) = (self.engine.docker.clone(), id.to_string());
            // Whatever is left of it (a stopped container) goes too.
            crate::tier::background::spawn(async move { super::lifecycle::remove(&docker, &id).await });
            self.changed.notify_waiters();
            self.refill();
        }
        held
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
                st.dropped = None;
                st.ready.drain(..).collect()
            }
        };
        if !stale.is_empty() {
            // Counted as in flight, so that a drain waits for them.
            let guard = Filling::count(self);
            let me = self.clone();
            tokio::spawn(async move {
                futures_util::future::join_all(stale.iter().map(|id| super::lifecycle::remove(&me.engine.docker, id)))
                    .await;
                drop(guard);
                me.refill();
            });
        }
        self.refill();
    }

    /// A ready container of `shape`, if there is one. Does not refill: the
    /// caller calls `want` once its run is over, so that creating the next
    /// container never competes with the run for the daemon and the CPU.
    pub(crate) fn take(self: &Arc<Self>, shape: &Shape) -> Taken {
        let mut st = self.lock();
        st.failures = 0;
        let id = if st.shape.as_ref() == Some(shape) { st.ready.pop_front() } else { None };
        let gone = if id.is_none() { st.dropped.take().map(|(_, why)| why) } else { None };
        Taken { id, gone }
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
            let guard = Filling(self.clone());
            let me = self.clone();
            tokio::spawn(async move {
                let run_id = format!("warm-{}", super::container::new_run_id());
                let r = super::lifecycle::launch(&me.engine, &shape, &run_id, me.tier).await;
                let extra = {
                    let mut st = me.lock();
                    match r {
                        Ok(id) if !st.closed && st.shape.as_ref() == Some(&shape) => {
                            // Not a success yet (see `forget`): failures are
                            // reset when a run takes a member.
                            st.ready.push_back(id);
                            // Full again: an old reason would mislead a later cold start.
                            st.dropped = None;
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
                drop(guard);
                me.refill();
            });
        }
    }

    /// Wait until the pool is full again (or cannot fill, or is closed).
    pub(crate) async fn settle(self: &Arc<Self>) {
        // Whatever left the pool short (members dropped while the refills
        // were stopped), it fills now; and never a wait without an end.
        self.refill();
        let waited = tokio::time::timeout(DRAIN_WAIT, async {
            loop {
                let notified = self.changed.notified();
                {
                    let st = self.lock();
                    let full = st.ready.len() >= self.size;
                    let stuck = st.filling == 0 && st.failures > 0;
                    if st.shape.is_none() || st.closed || full || stuck {
                        return;
                    }
                    if st.filling == 0 {
                        // Short, nothing in flight, no failure: not waiting
                        // for a notice that nothing will send.
                        drop(st);
                        self.refill();
                        if self.lock().filling == 0 {
                            return;
                        }
                        continue;
                    }
                }
                notified.await;
            }
        });
        if waited.await.is_err() {
            tracing::warn!("warm pool ({}): not full after {DRAIN_WAIT:?}", self.tier);
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
        if let Some(w) = self.watch.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w.abort();
        }
        let settled = tokio::time::timeout(DRAIN_WAIT, async {
            loop {
                let notified = self.changed.notified();
                if self.lock().filling == 0 {
                    break;
                }
                notified.await;
            }
        });
        if settled.await.is_err() {
            // Never a hang at exit: what is still being made goes to the
            // next start's reaper (its owner label).
            tracing::warn!("warm pool ({}): containers still being made after {DRAIN_WAIT:?}", self.tier);
        }
        let ids: Vec<String> = self.lock().ready.drain(..).collect();
        let docker = &self.engine.docker;
        futures_util::future::join_all(ids.iter().map(|id| super::lifecycle::remove(docker, id))).await;
    }
}

const OOM: &str = "killed at its memory limit (OOM)";

/// Why the engine says a container of ours ended, in words for a run's
/// note. Spellings of other engines too (Podman's compatible API says
/// `died`); an action that does not end a container is None.
pub(super) fn reason(action: &str, exit: Option<&str>) -> Option<String> {
    Some(match (action, exit) {
        ("destroy" | "remove", _) => "removed outside sandbench".into(),
        ("oom", _) => OOM.into(),
        ("pause", _) => "paused outside sandbench".into(),
        ("die" | "died", Some("137")) => "killed (SIGKILL)".into(),
        ("die" | "died", Some(code)) => format!("ended (exit {})", crate::sanitize::inert_line(code, 12)),
        ("die" | "died", None) => "ended".into(),
        _ => return None,
    })
}

/// Follow the engine's events for this process's containers and drop pool
/// members that die or go; reconnect with backoff when the stream breaks,
/// reconciling with the engine's list first (events missed meanwhile).
async fn watch(pool: std::sync::Weak<Pool>) {
    use bollard::query_parameters::{EventsOptions, ListContainersOptions};
    use futures_util::StreamExt;
    use std::collections::HashMap;

    let Ok(token) = crate::owner::token() else { return };
    let owner = format!("{}={}", super::container::LABEL_OWNER, super::reap::owner_label(token));
    let mut backoff = std::time::Duration::from_millis(250);
    let mut first = true;
    let mut last: Option<i64> = None;
    loop {
        let Some(docker) = pool.upgrade().map(|p| p.engine.docker.clone()) else { return };
        let filters = HashMap::from([
            ("type".to_string(), vec!["container".to_string()]),
            ("label".to_string(), vec![owner.clone()]),
            ("event".to_string(), ["die", "destroy", "oom", "pause"].map(String::from).to_vec()),
        ]);
        // Resumed from the last event seen: the engine replays what came
        // while the stream was down (its event log is bounded; the list
        // below covers the rest).
        let since = last.map(|t| t.to_string());
        let mut events = docker.events(Some(EventsOptions { filters: Some(filters), since, ..Default::default() }));
        if !first {
            // What still runs, asked after the stream broke: a container
            // that died meanwhile is not in the list. The members are read
            // first, so one a refill adds after the list is not judged by it.
            let Some(members) = pool.upgrade().map(|p| p.ready_ids()) else { return };
            let filters = HashMap::from([
                ("label".to_string(), vec![owner.clone()]),
                ("status".to_string(), vec!["running".to_string()]),
            ]);
            let listed =
                docker.list_containers(Some(ListContainersOptions { filters: Some(filters), ..Default::default() }));
            if let Ok(list) = listed.await {
                let running: std::collections::HashSet<String> = list.into_iter().filter_map(|c| c.id).collect();
                let Some(p) = pool.upgrade() else { return };
                for id in members.iter().filter(|id| !running.contains(*id)) {
                    p.forget(id, "gone while the engine was unreachable (restarted?)");
                }
            }
        }
        first = false;
        while let Some(ev) = events.next().await {
            let Ok(ev) = ev else { break };
            backoff = std::time::Duration::from_millis(250);
            last = ev.time.or(last);
            let Some(actor) = ev.actor else { continue };
            let (Some(id), Some(action)) = (actor.id, ev.action) else { continue };
            let exit = actor
                .attributes
                .as_ref()
                .and_then(|a| a.get("exitCode").or_else(|| a.get("containerExitCode")))
                .map(String::as_str);
            let Some(why) = reason(&action, exit) else { continue };
            let Some(p) = pool.upgrade() else { return };
            if p.lock().closed {
                return;
            }
            p.forget(&id, &why);
        }
        if pool.upgrade().is_none_or(|p| p.lock().closed) {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(std::time::Duration::from_secs(10));
    }
}

#[cfg(test)]
mod tests {
    use super::reason;

    #[test]
    fn an_ended_member_is_named_by_what_ended_it() {
        assert_eq!(reason("destroy", None).unwrap(), "removed outside sandbench");
        assert_eq!(reason("die", Some("137")).unwrap(), "killed (SIGKILL)");
        assert_eq!(reason("died", Some("3")).unwrap(), "ended (exit 3)");
        assert_eq!(reason("pause", None).unwrap(), "paused outside sandbench");
        assert_eq!(reason("oom", None).unwrap(), "killed at its memory limit (OOM)");
        assert!(reason("start", None).is_none());
        // The engine's attribute is text: a hostile one stays one inert line.
        assert!(!reason("die", Some("1\x1b[2J\n")).unwrap().contains('\x1b'));
    }
}
