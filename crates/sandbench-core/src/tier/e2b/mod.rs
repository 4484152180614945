//! The `e2b` tier: the program runs in a fresh E2B sandbox (a Firecracker
//! microVM on E2B's hosts), created for the run and killed after it. This is
//! how a user outgrows one machine: nothing runs on the local kernel, and the
//! number of sandboxes at once is E2B's quota, not local cores.
//!
//! Flow: `POST /v2/sandboxes` (REST API, `api.rs`) → upload the program to envd
//! (`envd.rs`) → `process.Process/Start` streams stdout/stderr and the exit →
//! `DELETE /sandboxes/{id}`, always: on a normal end, on cancel, wall timeout,
//! error, and — through [`kill_live`] and a SIGTERM/SIGHUP hook — when
//! sandbench itself exits. A sandbench that is SIGKILLed cannot make HTTP
//! calls, so every sandbox is also created with an E2B timeout of wall time +
//! a margin: E2B reaps it by itself shortly after the run could have ended.
//!
//! Configuration: `E2B_API_KEY` (required), `E2B_DOMAIN` (default
//! `e2b.app`), `E2B_API_URL` (default `https://api.<domain>`),
//! `E2B_SANDBOX_URL` (every envd call goes there) and `E2B_DEBUG` — the names
//! and meanings of E2B's own SDK, read by the config ([`crate::config::RemoteEnv`]), never
//! here — and `[e2b] template`, `[e2b] timeout_margin_secs` in the config.
//!
//! envd routing follows the SDK (`ConnectionConfig.get_sandbox_url`, e2b
//! 2.63): on E2B's own domains every envd call goes to
//! `https://sandbox.<domain>`, and E2B's edge routes it by the
//! `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers; on other domains (self-hosted
//! E2B) to the per-sandbox host `https://49983-<id>.<domain>`, which the SDK
//! keeps for direct signed file URLs (sandbench makes none).

pub(crate) mod api;
mod enforce;
pub(crate) mod envd;
mod exec;
pub(crate) mod live;
pub(crate) mod session;
pub(crate) mod settings;

use anyhow::anyhow;
use serde_json::json;

use crate::config::Config;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, UsageSample};
use crate::spec::RunSpec;
use crate::tier::contract::{Availability, BoxFuture, Check, Tier, TierExit};
use api::Api;
use enforce::limit_enforcement;
pub(crate) use enforce::{check_allow_list, refuse_secrets};
use envd::Envd;
use exec::{execute, Usage};
pub(crate) use live::kill_live;
use live::{reap_orphans_once, LiveGuard};
use settings::Settings;

pub struct E2bTier {
    settings: Settings,
}

impl E2bTier {
    pub fn new(config: &Config) -> Self {
        E2bTier { settings: Settings::from_config(config) }
    }

    pub fn with_settings(settings: Settings) -> Self {
        E2bTier { settings }
    }

    fn key(&self) -> anyhow::Result<&str> {
        self.settings.api_key.as_deref().ok_or_else(|| {
            anyhow!("E2B_API_KEY is not set: export E2B_API_KEY=e2b_... (from https://e2b.dev/dashboard?tab=keys) to use the e2b tier")
        })
    }
}

// ── the tier ─────────────────────────────────────────────────────────────────

impl Tier for E2bTier {
    fn name(&self) -> &'static str {
        "e2b"
    }

    fn check_network(&self, network: &crate::egress::Network) -> Result<(), String> {
        check_allow_list(network)
    }

    fn check_secrets(&self, secrets: &crate::egress::secrets::Secrets) -> Result<(), String> {
        refuse_secrets(secrets)
    }

    fn describe(&self) -> &'static str {
        "hosted Firecracker microVM per run (E2B, over HTTPS)"
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(self.run_inner(spec, ctx))
    }

    /// The E2B sandbox stays between calls (`session.rs`).
    fn sessions(&self) -> Result<(), String> {
        self.key().map(|_| ()).map_err(|e| e.to_string())
    }

    fn open_session(
        &self,
        spec: crate::tier::contract::SessionSpec,
    ) -> BoxFuture<'_, anyhow::Result<std::sync::Arc<dyn crate::tier::contract::TierSession>>> {
        let key = self.key().map(str::to_string);
        let settings = self.settings.clone();
        Box::pin(async move { session::open(settings, key?, spec).await })
    }
}

impl E2bTier {
    async fn probe_inner(&self) -> Availability {
        let s = &self.settings;
        let mut checks = vec![];
        let unavailable = |summary: String, checks: Vec<Check>| Availability {
            tier: "e2b".into(),
            available: false,
            summary,
            checks,
        };
        let Some(key) = s.api_key.as_deref() else {
            checks.push(Check::fail(
                "key",
                "E2B_API_KEY is not set",
                "export E2B_API_KEY=e2b_... (get one at https://e2b.dev/dashboard?tab=keys)",
            ));
            return unavailable("no key: E2B_API_KEY is not set".into(), checks);
        };
        checks.push(Check::ok("key", "E2B_API_KEY is set"));
        let api = match Api::new(s, key) {
            Ok(a) => a,
            Err(e) => return unavailable(format!("cannot build an HTTP client: {e}"), checks),
        };
        match api.list().await {
            Ok(list) => {
                checks.push(Check::ok(
                    "api",
                    format!("{} answers; the key is accepted ({} sandbox(es) running)", api.base(), list.len()),
                ));
                checks.push(Check::ok("template", format!("'{}' (set [e2b] template in the config)", s.template)));
                Availability {
                    tier: "e2b".into(),
                    available: true,
                    summary: format!(
                        "ready ({}, template {}; no sandbox was started by this check)",
                        api.base(),
                        s.template
                    ),
                    checks,
                }
            }
            Err(e @ api::ApiError::Unauthorized { .. }) => {
                checks.push(Check::fail(
                    "key",
                    e.to_string(),
                    "create a new key at https://e2b.dev/dashboard?tab=keys and export E2B_API_KEY",
                ));
                unavailable("key rejected by E2B".into(), checks)
            }
            Err(e @ api::ApiError::Unreachable { .. }) => {
                checks.push(Check::fail("api", e.to_string(), "check the network, or E2B_DOMAIN / E2B_API_URL"));
                unavailable(format!("unreachable: {}", api.base()), checks)
            }
            Err(e) => {
                checks.push(Check::fail("api", e.to_string(), "see https://status.e2b.dev and try again"));
                unavailable(format!("E2B API error: {e}"), checks)
            }
        }
    }

    async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let s = &self.settings;
        let key = self.key()?;
        let api = Api::new(s, key)?;
        reap_orphans_once(s, key);
        let ttl = (spec.limits.wall_time + s.timeout_margin).as_secs_f64().ceil() as u64;
        ctx.emit(EventKind::Phase(Phase::Booting)).await;
        // Not raced against ctx.stop: a create that completes after we gave up
        // would leave a sandbox whose id we never learnt.
        let created = api
            .create(&s.template, ttl, &spec.limits.network, &|m| {
                // Live (the callback cannot await; a full channel only loses the note).
                let _ = ctx.tx.try_send(crate::event::RunEvent {
                    at_ms: ctx.ms(),
                    kind: EventKind::Note(crate::sanitize::inert_line(&m, crate::event::MAX_DETAIL)),
                });
            })
            .await;
        let created = created?;
        let guard = LiveGuard::register(&created.sandbox_id, s, key);
        ctx.note(format!("e2b sandbox {} (template {})", created.sandbox_id, s.template)).await;

        let envd_url = s.envd_url(&created.sandbox_id, created.domain.as_deref());
        // Everything between create and kill is in here, so that no `?`
        // can skip the kill.
        let result = async {
            let http = crate::http::client(&[envd_url.as_str()])?;
            let envd = Envd::new(http, envd_url.clone(), created.sandbox_id.clone(), created.envd_access_token.clone());
            if ctx.stop.is_cancelled() {
                ctx.emit(EventKind::Exit(ExitStatus::default())).await;
                Ok(Usage::default())
            } else {
                execute(&envd, &spec, &ctx, s.timeout_margin).await
            }
        }
        .await;

        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        let kill = api.kill_with_retry(&created.sandbox_id).await;
        let killed = match &kill {
            Ok(_) => {
                guard.killed();
                true
            }
            Err(e) => {
                ctx.note(format!(
                    "warning: could not kill e2b sandbox {} ({e}); E2B stops it at its {ttl} s timeout",
                    created.sandbox_id
                ))
                .await;
                // Left in the registry: sandbench tries again when it exits.
                drop(guard);
                false
            }
        };
        let usage = result?;
        let details = json!({
            "start": "cold",
            "sandbox_id": created.sandbox_id,
            "template": created.template_id.clone().unwrap_or_else(|| s.template.clone()),
            "envd_version": created.envd_version,
            "api_url": api.base(),
            "envd_url": envd_url,
            "transport": "envd process.Process/Start (Connect-RPC, JSON, server-streaming)",
            "sandbox_timeout_s": ttl,
            "sandbox_killed": killed,
            "isolation": "Firecracker microVM on E2B's hosts",
            "limits": limit_enforcement(&spec),
            "usage_source": if usage.sampled { "envd /metrics: memory of the whole VM, guest OS included" } else { "unavailable: envd /metrics did not answer" },
        });
        Ok(TierExit { usage: Some(UsageSample { cpu_ms: None, memory_bytes: usage.peak_memory, pids: None }), details })
    }
}
