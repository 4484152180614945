//! The process tier's side of the `Tier` contract: what the engine asks of
//! it, answered from the files that do the work.

use std::sync::Arc;

use super::facts::{host_maxima, interpreter_on_host};
use super::{session, ProcessTier};
use crate::event::RunContext;
use crate::spec::{Language, RunSpec};
use crate::tier::contract::{Availability, BoxFuture, LimitMaxima, Tier, TierExit};

impl Tier for ProcessTier {
    fn name(&self) -> &'static str {
        "process"
    }

    /// The spare and what it holds (its processes' PSS).
    fn warm(&self) -> Option<String> {
        if !self.keep_spare {
            return None;
        }
        let mut dead = None;
        let mem = self.spare.lock().ok().and_then(|mut s| {
            let (l, language) = s.as_mut().filter(|(l, _)| l.ready)?;
            let language = *language;
            // Outside a runtime (nothing could tear it down) it is only not shown.
            if l.waiting() || tokio::runtime::Handle::try_current().is_err() {
                return l.waiting().then(|| (l.memory(), language, l.zygote.is_some()));
            }
            // Killed from outside (its init, its zygote): what is shown is
            // what runs, so it goes now and another is made.
            dead = s.take();
            None
        });
        if let Some((mut l, _)) = dead {
            let _ = l.child.start_kill();
            crate::tier::background::spawn(l.teardown());
            self.refill();
        }
        Some(match mem {
            Some((b, language, forked)) => {
                let (b, zygote) = self.spare_memory(b, forked);
                let how = if zygote.is_some() { " (forked from the zygote)" } else { "" };
                format!("1 spare sandbox ready · {} started{how} · {} resident", language.name(), crate::units::size(b))
            }
            None => "no spare sandbox ready (one is made after a run)".into(),
        })
    }

    fn max_limits(&self) -> LimitMaxima {
        host_maxima()
    }

    /// Any allow list: the egress listener in the empty namespace is the way out.
    /// The sandbox sees the host's /usr: the host's interpreter is the one.
    fn language_support(&self, lang: Language) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            interpreter_on_host(lang).map(|_| ()).ok_or_else(|| {
                format!("no {} on this host (apt-get install {})", lang.interpreter()[0], lang.debian_package())
            })
        })
    }

    fn check_network(&self, _: &crate::egress::Network) -> Result<(), String> {
        Ok(())
    }

    /// Secrets: the proxy the namespace's only socket leads to substitutes them.
    fn check_secrets(&self, _: &crate::egress::secrets::Secrets) -> Result<(), String> {
        Ok(())
    }

    fn describe(&self) -> &'static str {
        "limited subprocess: namespaces, cgroup, Landlock, seccomp, rlimits"
    }

    fn probe(&self) -> BoxFuture<'_, Availability> {
        Box::pin(self.probe_inner())
    }

    fn run(&self, spec: RunSpec, ctx: RunContext) -> BoxFuture<'_, anyhow::Result<TierExit>> {
        Box::pin(self.run_inner(spec, ctx))
    }

    /// A spare sandbox, built and waiting (when `[process] spare` is on).
    fn prewarm(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.spare_ready())
    }

    /// The sandbox stays between calls (`session.rs`, `sandbox/session.rs`).
    fn sessions(&self) -> Result<(), String> {
        Ok(())
    }

    fn open_session(
        &self,
        spec: crate::tier::contract::SessionSpec,
    ) -> BoxFuture<'_, anyhow::Result<Arc<dyn crate::tier::contract::TierSession>>> {
        Box::pin(session::open(self, spec))
    }
}
