//! e2b sessions: the E2B sandbox stays between calls.
//!
//! The sandbox is created once (its E2B timeout is the session's lifetime
//! cap plus the margin, so E2B reaps it even if sandbench is killed outright)
//! and registered with the sandboxes killed at exit. Each call uploads its
//! program over the previous one's and starts it through envd like a run,
//! with the same per-process rlimits; files in the work directory stay. When
//! a call ends, sandbench ends every process of the sandbox's `user` (the
//! user envd starts programs as; on E2B's base template nothing else runs as
//! it), so a call's leftovers die with it. E2B enforces no memory, pids or
//! disk limit (the report says so); the session is killed on close.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::api::Api;
use super::enforce::limit_enforcement;
use super::envd::{Envd, EnvdError, ProcEvent};
use super::exec::{execute, WORK_DIR};
use super::live::{reap_orphans_once, LiveGuard};
use super::settings::Settings;
use crate::event::{EventKind, Phase, RunContext, UsageSample};
use crate::spec::RunSpec;
use crate::tier::contract::{BoxFuture, SessionSpec, TierExit, TierSession};

/// Run as `user` after every call: kill(-1) reaches every process of that
/// user but the shell itself. Never run anywhere else (as root it would
/// reach everything).
pub const CLEANUP_SCRIPT: &str = "kill -KILL -1 2>/dev/null; exit 0";
const CLEANUP_DEADLINE: Duration = Duration::from_secs(10);

pub(crate) struct E2bSession {
    api: Api,
    envd: Envd,
    sandbox_id: String,
    margin: Duration,
    guard: Mutex<Option<LiveGuard>>,
    details: serde_json::Value,
    alive: AtomicBool,
}

pub(crate) async fn open(s: Settings, key: String, spec: SessionSpec) -> anyhow::Result<Arc<dyn TierSession>> {
    let api = Api::new(&s, &key)?;
    reap_orphans_once(&s, &key);
    let ttl = (spec.max_life + s.timeout_margin).as_secs_f64().ceil() as u64;
    let created = api.create(&s.template, ttl, &spec.limits.network, &|m| tracing::info!("e2b: {m}")).await?;
    let guard = LiveGuard::register(&created.sandbox_id, &s, &key);
    let envd_url = s.envd_url(&created.sandbox_id, created.domain.as_deref());
    let http = match crate::http::client(&[envd_url.as_str()]) {
        Ok(h) => h,
        Err(e) => {
            if api.kill_with_retry(&created.sandbox_id).await.is_ok() {
                guard.killed();
            }
            return Err(e);
        }
    };
    let envd = Envd::new(http, envd_url.clone(), created.sandbox_id.clone(), created.envd_access_token.clone());
    let details = json!({
        "sandbox_id": created.sandbox_id,
        "template": created.template_id.clone().unwrap_or_else(|| s.template.clone()),
        "envd_version": created.envd_version,
        "api_url": api.base(),
        "envd_url": envd_url,
        "transport": "envd process.Process/Start (Connect-RPC, JSON, server-streaming)",
        "sandbox_timeout_s": ttl,
        "isolation": "Firecracker microVM on E2B's hosts, kept for the session",
        "between_calls": "every process of the sandbox's user is killed after each call",
    });
    Ok(Arc::new(E2bSession {
        api,
        envd,
        sandbox_id: created.sandbox_id,
        margin: s.timeout_margin,
        guard: Mutex::new(Some(guard)),
        details,
        alive: AtomicBool::new(true),
    }))
}

impl E2bSession {
    /// End every process the call left (as `user`); waits for the shell.
    async fn cleanup(&self) -> Result<(), EnvdError> {
        let args = vec!["-c".to_string(), CLEANUP_SCRIPT.to_string()];
        let mut stream =
            self.envd.start("/bin/bash", &args, &BTreeMap::new(), WORK_DIR, Some(CLEANUP_DEADLINE)).await?;
        while let Some(ev) = stream.next().await? {
            if matches!(ev, ProcEvent::End(_)) {
                break;
            }
        }
        Ok(())
    }
}

impl TierSession for E2bSession {
    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(async move {
            ctx.emit(EventKind::Phase(Phase::Preparing)).await;
            let result = execute(&self.envd, &spec, &ctx, self.margin).await;
            ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
            let cleaned = self.cleanup().await;
            let gone = |e: &EnvdError| matches!(e, EnvdError::Gone { .. } | EnvdError::Unauthorized(_));
            if let Err(e) = &cleaned {
                // A sandbox that cannot be cleaned serves no more calls.
                tracing::warn!("e2b session {}: cleanup failed: {e}", self.sandbox_id);
                self.alive.store(false, Ordering::Relaxed);
            }
            if let Err(e) = &result {
                if e.downcast_ref::<EnvdError>().is_some_and(gone) {
                    self.alive.store(false, Ordering::Relaxed);
                }
            }
            let usage = result?;
            if let Err(e) = cleaned {
                anyhow::bail!("could not end the call's processes in the sandbox ({e}); the session closes");
            }
            let mut details = self.details.clone();
            details["start"] = json!("session");
            details["limits"] = limit_enforcement(&spec);
            details["usage_source"] = json!(if usage.sampled {
                "envd /metrics: memory of the whole VM, guest OS included"
            } else {
                "unavailable: envd /metrics did not answer"
            });
            Ok(TierExit {
                usage: Some(UsageSample { cpu_ms: None, memory_bytes: usage.peak_memory, pids: None }),
                details,
            })
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.alive.store(false, Ordering::Relaxed);
            let guard = self.guard.lock().ok().and_then(|mut g| g.take());
            match self.api.kill_with_retry(&self.sandbox_id).await {
                Ok(_) => {
                    if let Some(g) = guard {
                        g.killed();
                    }
                }
                // Left in the registry: sandbench tries again when it exits,
                // and E2B's own timeout ends it.
                Err(e) => {
                    tracing::warn!("could not kill e2b sandbox {} ({e}); E2B stops it at its timeout", self.sandbox_id)
                }
            }
        })
    }

    fn alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }
}
