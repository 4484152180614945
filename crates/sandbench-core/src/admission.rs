//! Admission control for a server that runs programs for remote clients
//! (`sandbench mcp`): runs in flight, server-wide and per client, calls
//! waiting for a slot, open sessions, and a budget of memory and pids that
//! every run in flight and every session takes its limits from.
//!
//! A [`Permit`] is what a run or a session holds for as long as its sandbox
//! may exist: the holder moves it into the task that tears the sandbox down,
//! and the share goes back when that task drops it — never when a client
//! merely gives up on a call. What a client cancels is therefore still
//! counted until it is gone.
//!
//! Waiting calls queue in arrival order. A call held back only by its own
//! client's limit lets later calls of other clients pass; one waiting for a
//! server-wide share (a slot, memory, pids) keeps everything behind it
//! waiting, so a large request is never starved by a stream of small ones.
//! The queue is bounded, and so is what one client may have waiting (as
//! many as it may run, or half the queue): a call beyond either is refused
//! at once, with the limit and the flag that raises it in the message.
//!
//! A client is a key the caller gives: who authenticated (the stdio client,
//! one bearer token), never a connection or an MCP session, since one client
//! may open many of those or none at all (stateless requests), and each
//! would otherwise get a fresh allowance.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::oneshot;

use crate::policy::Bounds;
use crate::spec::format_size;

/// What a run or a session takes from the budget: its limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    pub memory: u64,
    pub pids: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Run,
    Session,
}

/// One server's admission state; share it in an `Arc`.
pub struct Admission {
    bounds: Bounds,
    max_sessions: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    runs: usize,
    sessions: usize,
    memory: u64,
    pids: u64,
    clients: HashMap<u64, Client>,
    queue: VecDeque<Waiter>,
}

#[derive(Default, Clone, Copy)]
struct Client {
    running: usize,
    waiting: usize,
    sessions: usize,
}

struct Waiter {
    client: u64,
    need: Need,
    tx: oneshot::Sender<Permit>,
}

/// What the server holds now (for `list_tiers` and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Load {
    pub runs: usize,
    pub queued: usize,
    pub sessions: usize,
    pub memory_bytes: u64,
    pub pids: u64,
}

/// A share of the server: a run slot or a session slot, with its memory and
/// pids. Given back when dropped.
pub struct Permit {
    adm: Option<Arc<Admission>>,
    client: u64,
    kind: Kind,
    need: Need,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Permit({:?} of client {}, {:?})", self.kind, self.client, self.need)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(adm) = self.adm.take() {
            let mut st = adm.lock();
            adm.undo(&mut st, self.client, self.kind, self.need);
            adm.dispatch(&mut st);
        }
    }
}

impl Admission {
    pub fn new(bounds: Bounds, max_sessions: usize) -> Arc<Admission> {
        Arc::new(Admission { bounds, max_sessions, state: Mutex::new(State::default()) })
    }

    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock left counters that are still
        // consistent (every update is a few additions): keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn load(&self) -> Load {
        let st = self.lock();
        Load { runs: st.runs, queued: st.queue.len(), sessions: st.sessions, memory_bytes: st.memory, pids: st.pids }
    }

    /// Admit a run of `client`: at once if it fits and nothing is ahead of
    /// it, else when the calls ahead have gone. Refused at once when it
    /// could never fit, when the queue is full, or when the client already
    /// has as many calls waiting as it may run. Dropping the returned future
    /// while it waits gives its place up.
    pub async fn run(self: &Arc<Self>, client: u64, need: Need) -> Result<Permit, String> {
        let rx = {
            let mut st = self.lock();
            self.never_fits(need)?;
            self.prune(&mut st);
            let c = st.clients.get(&client).copied().unwrap_or_default();
            let b = &self.bounds;
            if c.waiting >= self.max_waiting_per_client() {
                return Err(format!(
                    "this client already has {} run(s) in flight and {} waiting, the most one client may have \
                     (sandbench mcp --max-runs-per-client {} in flight, and as many waiting or half of \
                     --max-queue {}); wait for one to finish",
                    c.running, c.waiting, b.max_runs_per_client, b.max_queue
                ));
            }
            let ahead = !st.queue.is_empty();
            if !ahead && self.global_fits(&st, need) && c.running < b.max_runs_per_client {
                return Ok(self.take(&mut st, client, Kind::Run, need));
            }
            if st.queue.len() >= b.max_queue && c.running >= b.max_runs_per_client {
                return Err(format!(
                    "this client already has {} run(s) in flight, the most one client may have (sandbench mcp \
                     --max-runs-per-client {}), and this server's queue is full ({} waiting, --max-queue {}); \
                     wait for one to finish",
                    c.running,
                    b.max_runs_per_client,
                    st.queue.len(),
                    b.max_queue
                ));
            }
            if st.queue.len() >= b.max_queue {
                return Err(format!(
                    "this server has {} run(s) in flight (its most: sandbench mcp --max-runs {}) and {} call(s) \
                     waiting, all its queue holds (--max-queue {}); try again when a run has finished",
                    st.runs,
                    b.max_runs,
                    st.queue.len(),
                    b.max_queue
                ));
            }
            let (tx, rx) = oneshot::channel();
            st.queue.push_back(Waiter { client, need, tx });
            st.clients.entry(client).or_default().waiting += 1;
            self.dispatch(&mut st);
            rx
        };
        rx.await.map_err(|_| "internal error: the admission queue went away".to_string())
    }

    /// Admit a session (its sandbox's memory and pids for its whole life):
    /// at once or not at all.
    pub fn session(self: &Arc<Self>, client: u64, need: Need) -> Result<Permit, String> {
        let mut st = self.lock();
        self.never_fits(need)?;
        if st.sessions >= self.max_sessions {
            return Err(format!(
                "this server already has {} session(s) open (or being opened or torn down), its most (the \
                 operator sets it with sandbench mcp --max-sessions); close one with close_session",
                st.sessions
            ));
        }
        let held = st.clients.get(&client).map_or(0, |c| c.sessions);
        if held >= self.bounds.max_sessions_per_client {
            return Err(format!(
                "this client already has {held} session(s) open (or being opened or torn down), the most one \
                 client may hold (sandbench mcp --max-sessions-per-client {}); close one with close_session",
                self.bounds.max_sessions_per_client
            ));
        }
        if !self.budget_fits(&st, need) {
            return Err(format!(
                "the session's limits (memory {}, pids {}) do not fit what is left of this server's budget \
                 ({} of memory and {} pids in use of {} and {}: sandbench mcp --budget-memory, --budget-pids); \
                 ask for less or try again when runs have finished",
                format_size(need.memory),
                need.pids,
                format_size(st.memory),
                st.pids,
                format_size(self.bounds.budget_memory),
                self.bounds.budget_pids
            ));
        }
        Ok(self.take(&mut st, client, Kind::Session, need))
    }

    /// What one client may have waiting: as many as it may run, or half
    /// the queue, so that one client never fills the queue alone.
    fn max_waiting_per_client(&self) -> usize {
        self.bounds.max_runs_per_client.max(self.bounds.max_queue / 2)
    }

    fn never_fits(&self, need: Need) -> Result<(), String> {
        let b = &self.bounds;
        if need.memory > b.budget_memory {
            return Err(format!(
                "limits.memory {} is above this server's memory budget {} for everything in flight (the operator \
                 raises it with sandbench mcp --budget-memory)",
                format_size(need.memory),
                format_size(b.budget_memory)
            ));
        }
        if need.pids > b.budget_pids {
            return Err(format!(
                "limits.pids {} is above this server's pids budget {} for everything in flight (the operator \
                 raises it with sandbench mcp --budget-pids)",
                need.pids, b.budget_pids
            ));
        }
        Ok(())
    }

    fn budget_fits(&self, st: &State, need: Need) -> bool {
        st.memory.saturating_add(need.memory) <= self.bounds.budget_memory
            && st.pids.saturating_add(need.pids) <= self.bounds.budget_pids
    }

    fn global_fits(&self, st: &State, need: Need) -> bool {
        st.runs < self.bounds.max_runs && self.budget_fits(st, need)
    }

    fn take(self: &Arc<Self>, st: &mut State, client: u64, kind: Kind, need: Need) -> Permit {
        match kind {
            Kind::Run => {
                st.runs += 1;
                st.clients.entry(client).or_default().running += 1;
            }
            Kind::Session => {
                st.sessions += 1;
                st.clients.entry(client).or_default().sessions += 1;
            }
        }
        st.memory += need.memory;
        st.pids += need.pids;
        Permit { adm: Some(self.clone()), client, kind, need }
    }

    fn undo(&self, st: &mut State, client: u64, kind: Kind, need: Need) {
        match kind {
            Kind::Run => {
                st.runs = st.runs.saturating_sub(1);
                if let Some(c) = st.clients.get_mut(&client) {
                    c.running = c.running.saturating_sub(1);
                }
            }
            Kind::Session => {
                st.sessions = st.sessions.saturating_sub(1);
                if let Some(c) = st.clients.get_mut(&client) {
                    c.sessions = c.sessions.saturating_sub(1);
                }
            }
        }
        st.memory = st.memory.saturating_sub(need.memory);
        st.pids = st.pids.saturating_sub(need.pids);
        self.forget_idle(st, client);
    }

    fn forget_idle(&self, st: &mut State, client: u64) {
        if st.clients.get(&client).is_some_and(|c| c.running == 0 && c.waiting == 0 && c.sessions == 0) {
            st.clients.remove(&client);
        }
    }

    /// Drop waiters whose call was given up.
    fn prune(&self, st: &mut State) {
        let mut i = 0;
        while i < st.queue.len() {
            if st.queue[i].tx.is_closed() {
                if let Some(w) = st.queue.remove(i) {
                    self.unwait(st, w.client);
                }
            } else {
                i += 1;
            }
        }
    }

    fn unwait(&self, st: &mut State, client: u64) {
        if let Some(c) = st.clients.get_mut(&client) {
            c.waiting = c.waiting.saturating_sub(1);
        }
        self.forget_idle(st, client);
    }

    /// Admit what fits, in order (see the module's doc).
    fn dispatch(self: &Arc<Self>, st: &mut State) {
        self.prune(st);
        let mut i = 0;
        while i < st.queue.len() {
            let (client, need) = (st.queue[i].client, st.queue[i].need);
            if !self.global_fits(st, need) {
                break;
            }
            let running = st.clients.get(&client).map_or(0, |c| c.running);
            if running >= self.bounds.max_runs_per_client {
                i += 1;
                continue;
            }
            let Some(w) = st.queue.remove(i) else { break };
            self.unwait(st, client);
            let permit = self.take(st, client, Kind::Run, need);
            if let Err(mut p) = w.tx.send(permit) {
                // Given up between the prune and now: its share goes back
                // here (a drop would take the lock we hold).
                p.adm = None;
                self.undo(st, p.client, p.kind, p.need);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn bounds(runs: usize, per_client: usize, queue: usize, memory: u64) -> Bounds {
        Bounds {
            max_runs: runs,
            max_runs_per_client: per_client,
            max_sessions_per_client: 4,
            max_queue: queue,
            budget_memory: memory,
            budget_pids: 1000,
        }
    }

    const M: u64 = 1 << 20;

    fn need(memory: u64) -> Need {
        Need { memory, pids: 10 }
    }

    /// Polls a future once: Some if it finished.
    async fn ready<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_millis(20), f).await.ok()
    }

    #[tokio::test]
    async fn runs_past_the_most_wait_in_order_and_a_full_queue_is_refused() {
        let a = Admission::new(bounds(2, 2, 2, 1 << 40), 4);
        let p1 = a.run(1, need(M)).await.unwrap();
        let _p2 = a.run(2, need(M)).await.unwrap();
        let mut w3 = Box::pin(a.run(3, need(M)));
        let mut w4 = Box::pin(a.run(4, need(M)));
        assert!(ready(&mut w3).await.is_none() && ready(&mut w4).await.is_none());
        assert_eq!(a.load().queued, 2);
        let e = a.run(5, need(M)).await.unwrap_err();
        assert!(e.contains("--max-runs 2") && e.contains("--max-queue 2"), "{e}");
        drop(p1);
        let p3 = ready(&mut w3).await.expect("the first waiter goes first").unwrap();
        assert!(ready(&mut w4).await.is_none());
        assert_eq!(a.load(), Load { runs: 2, queued: 1, sessions: 0, memory_bytes: 2 * M, pids: 20 });
        drop(p3);
        assert!(ready(&mut w4).await.is_some());
    }

    #[tokio::test]
    async fn a_client_at_its_most_lets_other_clients_pass_and_may_queue_only_as_many() {
        let a = Admission::new(bounds(3, 1, 2, 1 << 40), 4);
        let p1 = a.run(1, need(M)).await.unwrap();
        let mut w1 = Box::pin(a.run(1, need(M)));
        assert!(ready(&mut w1).await.is_none(), "client 1 is at its most");
        let e = a.run(1, need(M)).await.unwrap_err();
        assert!(
            e.contains("this client already has 1 run(s) in flight and 1 waiting")
                && e.contains("--max-runs-per-client 1"),
            "{e}"
        );
        // Another client is not held up by client 1's waiting call.
        let _p2 = a.run(2, need(M)).await.unwrap();
        drop(p1);
        assert!(ready(&mut w1).await.is_some());
    }

    #[tokio::test]
    async fn the_budget_holds_and_a_large_request_is_not_starved() {
        let a = Admission::new(bounds(10, 10, 10, 300 * M), 4);
        let small = a.run(1, need(100 * M)).await.unwrap();
        let _small2 = a.run(2, need(100 * M)).await.unwrap();
        let mut big = Box::pin(a.run(3, need(200 * M)));
        assert!(ready(&mut big).await.is_none());
        // A later small one would fit, but the big one is ahead of it.
        let mut later = Box::pin(a.run(4, need(50 * M)));
        assert!(ready(&mut later).await.is_none());
        drop(small);
        assert!(ready(&mut big).await.is_some());
        let e = a.run(5, need(400 * M)).await.unwrap_err();
        assert!(e.contains("above this server's memory budget 300M") && e.contains("--budget-memory"), "{e}");
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_frees_its_place() {
        let a = Admission::new(bounds(1, 1, 1, 1 << 40), 4);
        let p = a.run(1, need(M)).await.unwrap();
        let mut w = Box::pin(a.run(2, need(M)));
        assert!(ready(&mut w).await.is_none());
        drop(w);
        // Its place in the queue is free again.
        let mut w3 = Box::pin(a.run(3, need(M)));
        assert!(ready(&mut w3).await.is_none());
        drop(p);
        assert!(ready(&mut w3).await.is_some());
        assert_eq!(a.load().queued, 0);
    }

    #[tokio::test]
    async fn a_client_holds_at_most_its_sessions_and_others_are_not_held_up() {
        let mut b = bounds(4, 4, 4, 1 << 40);
        b.max_sessions_per_client = 1;
        let a = Admission::new(b, 4);
        let s1 = a.session(1, need(M)).unwrap();
        let e = a.session(1, need(M)).unwrap_err();
        assert!(
            e.contains("this client already has 1 session(s) open") && e.contains("--max-sessions-per-client 1"),
            "{e}"
        );
        let _s2 = a.session(2, need(M)).unwrap();
        // Runs of the client do not free or take its session share.
        let r = a.run(1, need(M)).await.unwrap();
        assert!(a.session(1, need(M)).is_err());
        drop(r);
        assert!(a.session(1, need(M)).is_err(), "the client's session is still open");
        drop(s1);
        let _s3 = a.session(1, need(M)).unwrap();
    }

    #[tokio::test]
    async fn sessions_are_bounded_and_hold_their_share_until_dropped() {
        let a = Admission::new(bounds(4, 4, 4, 300 * M), 2);
        let s1 = a.session(1, need(128 * M)).unwrap();
        let e = a.session(2, need(256 * M)).unwrap_err();
        assert!(e.contains("do not fit") && e.contains("--budget-memory"), "{e}");
        let s2 = a.session(2, need(128 * M)).unwrap();
        let e = a.session(3, need(M)).unwrap_err();
        assert!(e.contains("already has 2 session(s) open") && e.contains("--max-sessions"), "{e}");
        // A run that does not fit what the sessions leave waits.
        let mut r = Box::pin(a.run(3, need(100 * M)));
        assert!(ready(&mut r).await.is_none());
        drop(s1);
        assert!(ready(&mut r).await.is_some());
        drop(s2);
        assert_eq!(a.load().sessions, 0);
    }
}
