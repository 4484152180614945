//! The spare: one sandbox built ahead, its interpreter started and
//! waiting, refilled off the run's path; which waiter a run starts ahead of
//! its program, and which spare can serve which run.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::launch::{launch, Launched};
use super::sandbox;
use super::ProcessTier;
use crate::spec::{Language, RunSpec};

/// The interpreter a run starts ahead of its program (Python's in spares and
/// sessions, which can exec another interpreter; the run's own when cold).
pub(super) fn waiter_for(spec: &RunSpec) -> sandbox::Waiter {
    waiter_with(spec, spec.sandbox_env("/work", "/tmp"))
}

/// The same with the run's whole environment (its egress variables too), so
/// that the interpreter started ahead can run the program itself.
pub(super) fn waiter_with(spec: &RunSpec, env: Vec<(String, String)>) -> sandbox::Waiter {
    sandbox::Waiter { interpreter: spec.interpreter(), file_name: spec.language.program_file(&spec.code).into(), env }
}

/// Node started ahead of a JavaScript run (`waiter.js`), in a run built for
/// itself or in a spare. A CommonJS program only: an ES module (`main.mjs`)
/// is loaded by a different loader, so its process waits before its exec
/// instead.
pub(super) fn node_waiter(spec: &RunSpec, env: Vec<(String, String)>) -> Option<sandbox::Waiter> {
    node_inline(spec).then(|| waiter_with(spec, env))
}

pub(super) fn node_inline(spec: &RunSpec) -> bool {
    spec.language.program_file(&spec.code) == spec.language.file_name()
}

/// Whether a spare whose interpreter is `spare` can run `spec`. Python's
/// waiter runs Python inline and execs any other interpreter; Node's can
/// only run inline (it cannot exec another interpreter over itself): a
/// CommonJS program in exactly the environment the spare's Node was started
/// with. A Python, sh or ES module run, or one with variables of its own,
/// meeting a Node spare is built cold.
pub(super) fn spare_fits(spare: Language, spec: &RunSpec) -> bool {
    match spare {
        Language::Python => true,
        Language::Javascript => {
            spec.language == Language::Javascript
                && node_inline(spec)
                && waiter_for(spec).env == waiter_for(&RunSpec::new(Language::Javascript, "")).env
        }
        Language::Sh => false,
    }
}

/// The language a spare is made in after a run of `spec`: Node after a
/// CommonJS JavaScript run, else Python (which serves every language).
pub(super) fn spare_language_after(spec: &RunSpec) -> Language {
    if spec.language == Language::Javascript && node_inline(spec) {
        Language::Javascript
    } else {
        Language::Python
    }
}

impl ProcessTier {
    /// A spare for the next run, made in the background (one at a time).
    pub(super) fn refill(&self) {
        self.refill_after(Duration::ZERO)
    }

    /// The same, starting `after` from now: right after a run, so that the
    /// new helper's fork (which stalls every thread of this process while
    /// it copies the page tables) never delays the run's own report.
    pub(super) fn refill_after(&self, after: Duration) {
        if !self.keep_spare || self.spare.lock().map(|s| s.is_some()).unwrap_or(true) {
            return;
        }
        if self.filling.swap(true, Ordering::SeqCst) {
            return;
        }
        let slot = self.spare.clone();
        let filling = self.filling.clone();
        let limits = self.spare_limits.clone();
        let shape = self.shape();
        let language = self.spare_language.lock().map(|l| *l).unwrap_or(Language::Python);
        tokio::spawn(async move {
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            let mut spec = RunSpec::new(language, "");
            spec.limits = limits.clone();
            let made = async {
                let t0 = std::time::Instant::now();
                // Spares have no network: a run with an allow list is built for itself.
                let mut l = launch(&limits, Some(waiter_for(&spec)), None, None, false, &shape, t0).await?;
                l.wait_ready().await?;
                anyhow::Ok(l)
            };
            match made.await {
                Ok(l) => {
                    if let Ok(mut s) = slot.lock() {
                        if s.is_none() {
                            *s = Some((l, language));
                        }
                    }
                }
                Err(e) => tracing::info!("no spare process sandbox: {e:#}"),
            }
            filling.store(false, Ordering::SeqCst);
        });
    }

    /// The zygote's process id while one runs: what a chaos test kills to
    /// check that the next run is still served.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.zygote.as_ref()?.pid()
    }

    /// The cgroup directories of the spare waiting now, if any: what a
    /// caller checks is gone once this tier is (other tiers of the same
    /// process share its cgroups' name prefix).
    pub fn spare_cgroups(&self) -> Vec<std::path::PathBuf> {
        let Ok(s) = self.spare.lock() else { return vec![] };
        s.as_ref().and_then(|(l, _)| l.cg.as_ref()).map(|c| c.dirs()).unwrap_or_default()
    }

    /// The spare, if it can run `spec`; the next one is made for `spec`'s
    /// language. A spare that cannot run it is torn down in the background
    /// (off this run's path), so the refill after this run makes one that can.
    pub(super) fn take_spare(&self, spec: &RunSpec) -> (Option<Launched>, Option<&'static str>) {
        let next = spare_language_after(spec);
        if let Ok(mut l) = self.spare_language.lock() {
            *l = next;
        }
        let Ok(mut slot) = self.spare.lock() else { return (None, None) };
        let Some((mut l, language)) = slot.take() else { return (None, None) };
        let alive = l.waiting();
        let usable = l.ready && alive;
        if usable && spare_fits(language, spec) {
            return (Some(l), None);
        }
        if usable && language == next {
            // Still the right one for the run after this (a JavaScript run
            // with variables of its own meeting a Node spare): it stays.
            *slot = Some((l, language));
            return (None, None);
        }
        drop(slot);
        // An idle spare's helper waits for a program that never comes.
        let _ = l.child.start_kill();
        crate::tier::background::spawn(l.teardown());
        let gone = (!alive).then_some("the waiting sandbox or its zygote ended outside sandbench");
        (None, gone)
    }

    /// Wait until a spare is ready (or making one failed), at most 30 s.
    pub(super) async fn spare_ready(&self) {
        if !self.keep_spare {
            return;
        }
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_secs(30) {
            if self.spare.lock().map(|s| s.is_some()).unwrap_or(true) {
                return;
            }
            self.refill();
            tokio::time::sleep(Duration::from_millis(2)).await;
            if !self.filling.load(Ordering::SeqCst) && self.spare.lock().map(|s| s.is_none()).unwrap_or(true) {
                // The fill just failed (logged); the next run goes cold.
                return;
            }
        }
    }

    /// What a spare costs while it waits, measured on one built now.
    pub(super) async fn warm_check(&self) -> String {
        if !self.keep_spare {
            return "no spare ([process] spare = false): every run starts cold".into();
        }
        let mut spec = RunSpec::new(Language::Python, "");
        spec.limits = self.spare_limits.clone();
        let shape = self.shape();
        let built = async {
            let t0 = std::time::Instant::now();
            let mut l = launch(&self.spare_limits, Some(waiter_for(&spec)), None, None, false, &shape, t0).await?;
            l.wait_ready().await?;
            anyhow::Ok((l.memory(), t0.elapsed(), l.zygote.is_some()))
        };
        match built.await {
            Ok((bytes, took, forked)) => {
                let how = match self.spare_memory(bytes, forked) {
                    (all, Some(z)) => format!(
                        "its interpreter forked from a warm one (the zygote; [process] zygote = false turns it off): {} resident (PSS) with the zygote's {}",
                        crate::units::size(all),
                        crate::units::size(z)
                    ),
                    (all, None) => format!("its interpreter started: {} resident (PSS)", crate::units::size(all)),
                };
                format!(
                    "long-lived front ends keep 1 spare sandbox ready, {how}, built in {}; [process] spare = false turns it off",
                    crate::units::duration_ms(took.as_secs_f64() * 1000.0)
                )
            }
            Err(e) => format!("a spare could not be built ({e:#}): runs start cold"),
        }
    }
}
