//! The sandboxes this process has alive, killed at exit whatever happens
//! to the run, and the ones dead sandbench processes left, killed later.
//! Its own file because a one-shot run (`mod.rs`) and a session both
//! register their sandbox here.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::api::Api;
use super::settings::Settings;

struct LiveEntry {
    api_url: String,
    api_key: String,
    sandbox_url: Option<String>,
    debug: bool,
}

fn live() -> &'static Mutex<HashMap<String, LiveEntry>> {
    static LIVE: OnceLock<Mutex<HashMap<String, LiveEntry>>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

/// Ids of sandboxes this process created and has not killed yet.
pub fn live_sandboxes() -> Vec<String> {
    live().lock().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

/// Kill every sandbox this process still has (sandbench exiting). Bounded:
/// a few seconds at most, whatever the network does. Returns what the user
/// should know (sandboxes that could not be killed).
pub(crate) async fn kill_live() -> Vec<String> {
    let entries: Vec<(String, LiveEntry)> = match live().lock() {
        Ok(mut m) => m.drain().collect(),
        Err(_) => return vec![],
    };
    let kills = entries.into_iter().map(|(id, e)| async move {
        let s = Settings {
            api_key: Some(e.api_key.clone()),
            domain: String::new(),
            api_url: e.api_url,
            sandbox_url: e.sandbox_url,
            debug: e.debug,
            template: String::new(),
            timeout_margin: Duration::ZERO,
        };
        let Ok(api) = Api::new(&s, &e.api_key) else {
            return Some(format!("could not kill e2b sandbox {id} at exit (no client); E2B stops it at its timeout"));
        };
        match tokio::time::timeout(Duration::from_secs(5), api.kill(&id)).await {
            Ok(Ok(_)) => {
                tracing::info!("killed e2b sandbox {id} at exit");
                None
            }
            Ok(Err(err)) => {
                Some(format!("could not kill e2b sandbox {id} at exit ({err}); E2B stops it at its timeout"))
            }
            Err(_) => Some(format!("killing e2b sandbox {id} timed out; E2B stops it at its timeout")),
        }
    });
    futures_util::future::join_all(kills).await.into_iter().flatten().collect()
}

/// Kill the sandboxes that a dead sandbench process on this host left
/// running. Only ours: created by sandbench, with an owner token of this host
/// and boot whose owner lock is free (its process is gone, whatever pid
/// namespace it ran in). Runs once per process, in the background, the first
/// time the tier is used (not at every start: that would be a network call
/// for every command). E2B's own timeout reaps them anyway; this is sooner.
pub(super) fn reap_orphans_once(s: &Settings, key: &str) {
    static ONCE: OnceLock<()> = OnceLock::new();
    if ONCE.set(()).is_err() {
        return;
    }
    let Ok(api) = Api::new(s, key) else { return };
    tokio::spawn(async move {
        let n = reap_orphans(&api).await;
        if n > 0 {
            tracing::info!("killed {n} e2b sandbox(es) left by dead sandbench processes");
        }
    });
}

/// The reaping itself; returns how many were killed.
pub async fn reap_orphans(api: &Api) -> usize {
    let Ok(list) = api.list_by_metadata("created_by=sandbench").await else {
        return 0;
    };
    let mut sweep = crate::owner::Sweep::new();
    let mut killed = 0;
    for sb in list {
        let md = &sb["metadata"];
        let (Some(id), Some(owner)) = (sb["sandboxID"].as_str(), md["sandbench_owner"].as_str()) else {
            continue;
        };
        if md["created_by"] != "sandbench" || !sweep.dead(owner) {
            continue;
        }
        if matches!(api.kill(id).await, Ok(true)) {
            killed += 1;
        }
    }
    killed
}

pub(super) struct LiveGuard {
    id: String,
}

impl LiveGuard {
    pub(super) fn register(id: &str, s: &Settings, key: &str) -> LiveGuard {
        if let Ok(mut m) = live().lock() {
            m.insert(
                id.to_string(),
                LiveEntry {
                    api_url: s.api_url.clone(),
                    api_key: key.to_string(),
                    sandbox_url: s.sandbox_url.clone(),
                    debug: s.debug,
                },
            );
        }
        LiveGuard { id: id.to_string() }
    }

    pub(super) fn killed(self) {
        if let Ok(mut m) = live().lock() {
            m.remove(&self.id);
        }
    }
}
