//! The workbench's engine: it carries out the app's effects — runs, probes,
//! gauntlets, agent sessions, warm-ups — on tokio tasks and feeds what they
//! produce back to the app as `Msg`s. The only part of the workbench that
//! touches tiers; the event loop (`event_loop`) owns the terminal and time.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::app::{Effect, Msg};
use super::highlight::SyntaxAssets;
use super::run_view::PreSanitizer;
use crate::config::Config;
use crate::{runner, tier};

/// How often the runs view looks for runs other processes logged.
const LOG_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// How often the tier pane's "warm" line is refreshed.
const WARM_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// An unavailable tier is probed again after this, then twice as long each
/// time up to `REPROBE_MAX` (a probe builds a real sandbox: never a loop).
const REPROBE_FIRST: std::time::Duration = std::time::Duration::from_secs(15);
const REPROBE_MAX: std::time::Duration = std::time::Duration::from_secs(300);
/// Bytes of each stream a workbench run's report keeps (the run log keeps 8 KiB).
const REPORT_KEEPS: usize = 64 << 10;
/// Runs and probes: the only part that touches tiers.
pub struct Engine {
    config: Config,
    /// Run output and events: bounded, so a flood slows the sandbox, not the UI.
    pub run_tx: mpsc::Sender<Msg>,
    /// Probes, signals, the log: small and rare.
    pub ctl_tx: mpsc::UnboundedSender<Msg>,
    cancels: HashMap<u64, CancellationToken>,
    /// One instance of each tier for the whole session: its warm pool or
    /// spare sandbox lives in the instance, so a fresh instance per run
    /// started every run cold (11 of 11 process runs and 4 of 4 docker runs
    /// in a workbench session were cold before).
    tiers: HashMap<String, Arc<dyn tier::Tier>>,
}

impl Engine {
    pub fn new(config: &Config, run_tx: mpsc::Sender<Msg>, ctl_tx: mpsc::UnboundedSender<Msg>) -> Engine {
        Engine { config: config.clone(), run_tx, ctl_tx, cancels: HashMap::new(), tiers: HashMap::new() }
    }

    /// The session's instance of the named tier.
    fn tier(&mut self, name: &str) -> anyhow::Result<Arc<dyn tier::Tier>> {
        if let Some(t) = self.tiers.get(name) {
            return Ok(t.clone());
        }
        let t = tier::by_name(name, &self.config)?;
        self.tiers.insert(name.to_string(), t.clone());
        self.watch_warm(t.clone());
        Ok(t)
    }

    /// Tell the app what `t` holds warm, whenever that changes (the tier
    /// pane shows it), until the app is gone.
    fn watch_warm(&self, t: Arc<dyn tier::Tier>) {
        let tx = self.ctl_tx.clone();
        tokio::spawn(async move {
            let mut last: Option<Option<String>> = None;
            while !tx.is_closed() {
                let now = t.warm();
                if last.as_ref() != Some(&now) {
                    if tx.send(Msg::Warm(t.name().to_string(), now.clone())).is_err() {
                        return;
                    }
                    last = Some(now);
                }
                tokio::time::sleep(WARM_POLL).await;
            }
        });
    }

    pub fn probe_all(&mut self, names: &[String]) {
        for name in names {
            self.probe_one(name, true);
        }
    }

    /// Probe one tier; with `again`, an unavailable one is probed again in
    /// the background with backoff (a daemon started later, a runtime
    /// registered, a guest built become available without a restart).
    pub fn probe_one(&mut self, name: &str, again: bool) {
        {
            let found = self.tier(name);
            let (name, tx) = (name.to_string(), self.ctl_tx.clone());
            let all = self.config.prewarm == crate::config::Prewarm::All;
            tokio::spawn(async move {
                let t = match found {
                    Ok(t) => t,
                    Err(e) => {
                        let avail = tier::Availability {
                            tier: name.clone(),
                            available: false,
                            summary: format!("{e:#}"),
                            checks: vec![],
                        };
                        let _ = tx.send(Msg::Probed(avail));
                        return;
                    }
                };
                let mut avail = t.probe().await;
                let mut wait = REPROBE_FIRST;
                while !avail.available && again && !tx.is_closed() {
                    if tx.send(Msg::Probed(avail)).is_err() {
                        return;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(REPROBE_MAX);
                    avail = t.probe().await;
                }
                let ready = avail.available;
                let _ = tx.send(Msg::Probed(avail));
                // With `prewarm = "all"` every ready tier warms now; else the
                // app asks for the tiers the user selects (Effect::Prewarm).
                if ready && all {
                    t.prewarm().await;
                }
            });
        }
    }

    /// Follow the run log: what any sandbench process appends shows up in
    /// the runs view. A file is polled (no inotify: the log may sit on any
    /// file system), cheaply — a read from the last offset.
    pub fn follow_log(&self) {
        let Some(log) = crate::runlog::installed().cloned() else { return };
        let tx = self.ctl_tx.clone();
        tokio::spawn(async move {
            let mut offset = 0;
            loop {
                let l = log.clone();
                let read = tokio::task::spawn_blocking(move || l.read_from(offset)).await;
                if let Ok(Ok((entries, next))) = read {
                    offset = next;
                    if !entries.is_empty() && tx.send(Msg::LogEntries(entries)).is_err() {
                        return;
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(LOG_POLL).await;
            }
        });
    }

    pub fn load_assets(&self) {
        let tx = self.ctl_tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = tx.send(Msg::Assets(Arc::new(SyntaxAssets::load())));
        });
        // The last gauntlet, for the frontier chart before a new one runs.
        let tx = self.ctl_tx.clone();
        tokio::task::spawn_blocking(move || match crate::state::load_gauntlet_in(&crate::config::state_dir()) {
            Ok(Some(saved)) => {
                let _ = tx.send(Msg::SavedGauntlet(Box::new(saved.data), saved.saved_at));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("the last gauntlet is not shown: {e:#}"),
        });
    }

    pub fn apply(&mut self, e: Effect) {
        match e {
            Effect::Start { id, tier: name, spec } => {
                tracing::info!(id, tier = %name, label = %spec.label, "tui run start");
                let tier = match self.tier(&name) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = self.ctl_tx.send(Msg::Finished(id, failed(&name, &spec, format!("{e:#}"))));
                        return;
                    }
                };
                let logged = spec.clone();
                // The pane keeps its own bounded copy of the output: the
                // report needs only a head, whatever the output limit.
                let mut handle = runner::start_keeping(tier, spec, REPORT_KEEPS);
                self.cancels.insert(id, handle.canceller());
                let tx = self.run_tx.clone();
                tokio::spawn(async move {
                    let mut pre = PreSanitizer::default();
                    while let Some(ev) = handle.events.recv().await {
                        if let runner::Update::Finished(r) = &ev {
                            crate::runlog::record(&logged, r, None);
                        }
                        if tx.send(pre.convert(id, ev)).await.is_err() {
                            // The UI is gone: still drain so the run ends and cleans up.
                            handle.cancel();
                        }
                    }
                });
            }
            Effect::Probe(name) => {
                tracing::info!(tier = %name, "tui probe again");
                self.probe_one(&name, false);
            }
            Effect::Prewarm(name) => {
                if self.config.prewarm == crate::config::Prewarm::None {
                    return;
                }
                if let Ok(t) = self.tier(&name) {
                    tracing::info!(tier = %name, "tui prewarm");
                    tokio::spawn(async move { t.prewarm().await });
                }
            }
            Effect::Cancel(id) => {
                if let Some(c) = self.cancels.get(&id) {
                    c.cancel();
                }
            }
            Effect::Gauntlet { id, tiers: names, mut skipped, samples, limits } => {
                tracing::info!(id, tiers = ?names, samples = samples.len(), "tui gauntlet start");
                let mut tiers = vec![];
                for name in names {
                    match self.tier(&name) {
                        Ok(t) => tiers.push(t),
                        Err(e) => skipped.push((name, format!("{e:#}"))),
                    }
                }
                let stop = CancellationToken::new();
                self.cancels.insert(id, stop.clone());
                // The user's own key (if any), to keep it off the screen.
                let secret = self.config.env.anthropic_api_key.clone();
                let (gtx, mut grx) = mpsc::channel(16);
                let task = tokio::spawn(crate::gauntlet::run_until(
                    tiers,
                    skipped,
                    samples,
                    crate::gauntlet::Plan::new(limits, 1),
                    Some(gtx),
                    stop.clone(),
                ));
                let tx = self.run_tx.clone();
                let state_dir = crate::config::state_dir();
                tokio::spawn(async move {
                    let mut finished = false;
                    while let Some(mut ev) = grx.recv().await {
                        // The view has every cell from CellDone already: the
                        // matrix's copies (full reports) are not sent again.
                        if let crate::gauntlet::GauntletEvent::Finished(m) = &mut ev {
                            // Kept for `sandbench report --reuse` and the frontier.
                            let (m2, dir, s2) = (m.clone(), state_dir.clone(), secret.clone());
                            tokio::task::spawn_blocking(move || {
                                if let Err(e) = crate::state::save_gauntlet_in(&dir, &m2, s2.as_deref()) {
                                    tracing::warn!("could not keep the gauntlet: {e:#}");
                                }
                            });
                            m.cells.clear();
                        }
                        if let Some(s) = &secret {
                            super::gauntlet_view::redact_secret(&mut ev, s);
                        }
                        finished |= matches!(ev, crate::gauntlet::GauntletEvent::Finished(_));
                        let msg = match ev {
                            // Cut the output to bounded, sanitized heads here, not on the UI thread.
                            crate::gauntlet::GauntletEvent::CellDone(c) => {
                                Msg::GauntletCell(id, Box::new(super::gauntlet_view::CellView::new(*c)))
                            }
                            ev => Msg::Gauntlet(id, ev),
                        };
                        if tx.send(msg).await.is_err() {
                            // The UI is gone: stop after the cell in progress is cleaned up.
                            stop.cancel();
                        }
                    }
                    let why = match task.await {
                        Err(e) => Some(format!("the gauntlet task failed: {e}")),
                        Ok(_) if !finished => Some("the gauntlet ended without its matrix".to_string()),
                        Ok(_) => None,
                    };
                    if let Some(why) = why {
                        tracing::error!(id, "{why}");
                        let _ = tx.send(Msg::GauntletFailed(id, why)).await;
                    }
                });
            }
            Effect::Agent { id, tier: name, limits, task } => {
                tracing::info!(id, tier = %name, "tui agent start");
                let refuse = move |why: String| {
                    Msg::Agent(
                        id,
                        crate::agent::TranscriptEvent::Finished {
                            reason: crate::agent::EndReason::Error,
                            turns: 0,
                            answer: None,
                            error: Some(why),
                        },
                    )
                };
                let opts =
                    self.tier(&name).and_then(|t| crate::agent::AgentOptions::from_config(t, limits, &self.config));
                let opts = match opts {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = self.ctl_tx.send(refuse(format!("{e:#}")));
                        return;
                    }
                };
                let mut handle = crate::agent::start(opts, task);
                self.cancels.insert(id, handle.canceller());
                let tx = self.run_tx.clone();
                tokio::spawn(async move {
                    let mut finished = false;
                    while let Some(ev) = handle.events.recv().await {
                        finished |= matches!(ev, crate::agent::TranscriptEvent::Finished { .. });
                        if tx.send(Msg::Agent(id, ev)).await.is_err() {
                            handle.cancel();
                        }
                    }
                    let t = handle.finish().await;
                    if !finished {
                        let why = t.error.unwrap_or_else(|| "the agent loop ended without finishing".into());
                        let _ = tx.send(refuse(why)).await;
                    }
                });
            }
        }
    }
}

/// The report of a run that could not even start.
pub fn failed(tier: &str, spec: &crate::spec::RunSpec, error: String) -> Box<crate::report::RunReport> {
    Box::new(crate::report::RunReport {
        limits: spec.limits.clone(),
        ..crate::report::RunReport::failed(tier, spec.language.name(), &spec.label, error)
    })
}
