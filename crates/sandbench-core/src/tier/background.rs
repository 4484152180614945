//! Teardown that outlives a run's report. A run's report is final once its
//! program has exited and its output is drained; what is left (a sandbox's
//! last processes, its cgroup, a single-use container) goes here and is
//! awaited by [`drain`] — at shutdown, by the benchmarks before they count
//! leftovers — so nothing is ever dropped. A sandbench killed with
//! teardowns pending leaves only what the next start reaps (see `owner`).
//!
//! The runner runs each tier's `run` inside a [`Scope`]: a teardown spawned
//! from it is counted there too, so a front end that must know when a run's
//! sandbox is really gone (a server's admission control) can wait for it
//! (`runner::RunHandle::torn_down`).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

static PENDING: AtomicUsize = AtomicUsize::new(0);
static DONE: Notify = Notify::const_new();

/// Decrements the count however the task ends (also if it panics or its
/// runtime goes away).
struct Pending;

impl Drop for Pending {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::SeqCst);
        DONE.notify_waiters();
    }
}

/// The teardowns spawned from one run (see the module's doc).
#[derive(Default)]
pub(crate) struct Scope {
    pending: AtomicUsize,
    done: Notify,
}

impl Scope {
    /// Wait until every teardown spawned in this scope so far has finished.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.done.notified();
            if self.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Counted in a scope until dropped.
struct InScope(std::sync::Arc<Scope>);

impl Drop for InScope {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
        self.0.done.notify_waiters();
    }
}

tokio::task_local! {
    static SCOPE: std::sync::Arc<Scope>;
}

/// Run `f` with the teardowns it spawns counted in `scope`.
pub(crate) async fn scoped<F: Future>(scope: std::sync::Arc<Scope>, f: F) -> F::Output {
    SCOPE.scope(scope, f).await
}

/// Run `teardown` in the background, counted until it finishes.
pub(crate) fn spawn<F: Future<Output = ()> + Send + 'static>(teardown: F) {
    PENDING.fetch_add(1, Ordering::SeqCst);
    let guard = Pending;
    let scope = SCOPE.try_with(|s| s.clone()).ok().map(|s| {
        s.pending.fetch_add(1, Ordering::SeqCst);
        InScope(s)
    });
    tokio::spawn(async move {
        let _guard = guard;
        let _scope = scope;
        teardown.await;
    });
}

/// Teardowns still running.
pub(crate) fn pending() -> usize {
    PENDING.load(Ordering::SeqCst)
}

/// Wait until every pending teardown has finished, at most `limit`.
/// Returns how many were still running at the limit (0: all done).
pub async fn drain(limit: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let notified = DONE.notified();
        let n = pending();
        if n == 0 {
            return 0;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return pending();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_every_teardown() {
        let base = pending();
        for ms in [5u64, 20, 40] {
            spawn(async move { tokio::time::sleep(Duration::from_millis(ms)).await });
        }
        assert!(pending() >= base + 3);
        assert_eq!(drain(Duration::from_secs(10)).await, 0);
        spawn(async { tokio::time::sleep(Duration::from_secs(30)).await });
        assert!(drain(Duration::from_millis(20)).await >= 1, "still running at the limit");
    }

    #[tokio::test]
    async fn a_scope_waits_for_its_own_teardowns_only() {
        let scope = std::sync::Arc::new(Scope::default());
        spawn(async { tokio::time::sleep(Duration::from_secs(30)).await });
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        scoped(scope.clone(), async move {
            spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                d.store(true, Ordering::SeqCst);
            })
        })
        .await;
        tokio::time::timeout(Duration::from_secs(10), scope.wait()).await.expect("not held up by the other one");
        assert!(done.load(Ordering::SeqCst), "waited for its own teardown");
    }
}
