//! microvm sessions: the guest stays between calls.
//!
//! A session takes a guest the way a run does (pool, snapshot or boot) and
//! keeps it. Each call sends the agent (`guest/agent.py`) a RUN in session
//! mode: the program is a fresh process as the guest's unprivileged uid under
//! the run cgroup (the session's memory and pids limits) and the call's
//! rlimits; when it exits the agent kills everything else in the cgroup and
//! waits for the next RUN. Each call is judged on the cgroup counters it
//! added, on files changed during it and on scratch mounts that filled during
//! it. Cancelling a call sends KILL and waits for the program's exit; the
//! guest goes only when the session closes (or when it stops answering).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use super::exec::execute;
use super::vm::Guest;
use crate::event::{EventKind, Phase, RunContext};
use crate::spec::RunSpec;
use crate::tier::contract::{BoxFuture, TierExit, TierSession};

pub(crate) struct MicrovmSession {
    pub(super) guest: tokio::sync::Mutex<Option<Guest>>,
    pub(super) details: serde_json::Value,
    pub(super) alive: AtomicBool,
}

impl TierSession for MicrovmSession {
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            ctx.emit(EventKind::Phase(Phase::Preparing)).await;
            let mut held = self.guest.lock().await;
            let Some(guest) = held.as_mut() else {
                anyhow::bail!("the session's guest is gone");
            };
            let since = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64() - 0.05)
                .unwrap_or(0.0);
            let mut timeline = vec![];
            // Sessions keep no egress proxy (Session::open refused an allow list).
            let result = execute(&spec, &ctx, guest, None, Some(since), &mut timeline).await;
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            if result.is_err() || !guest.alive() {
                // A guest that broke the protocol or died serves no more calls.
                self.alive.store(false, Ordering::Relaxed);
                if let Some(g) = held.take() {
                    g.kill().await;
                }
            }
            let (usage, garbage, watch) = result?;
            let mut details = self.details.clone();
            details["start"] = json!("session");
            let mut t = serde_json::Map::new();
            for (k, v) in &timeline {
                t.insert((*k).into(), json!((v * 10.0).round() / 10.0));
            }
            details["timeline_ms"] = serde_json::Value::Object(t);
            if !watch.is_null() {
                details["scratch_watch"] = watch;
            }
            if garbage > 0 {
                details["control_channel_garbage_bytes"] = json!(garbage);
            }
            Ok(TierExit { usage, details })
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.alive.store(false, Ordering::Relaxed);
            if let Some(g) = self.guest.lock().await.take() {
                g.kill().await;
            }
        })
    }

    fn alive(&self) -> bool {
        if !self.alive.load(Ordering::Relaxed) {
            return false;
        }
        // Between calls (the lock is free), from the kernel: a QEMU killed
        // from outside has exited. During a call the call itself finds out.
        if let Ok(mut held) = self.guest.try_lock() {
            if !held.as_mut().is_some_and(|g| g.alive()) {
                self.alive.store(false, Ordering::Relaxed);
                return false;
            }
        }
        true
    }

    fn ended_why(&self) -> Option<String> {
        (!self.alive.load(Ordering::Relaxed)).then(|| "its guest's QEMU ended (killed outside sandbench?)".into())
    }
}
