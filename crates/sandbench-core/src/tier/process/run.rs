//! One run on the process tier: take the spare or build a sandbox for the
//! run, hand it the program, follow it to its exit (`pump.rs`), conclude
//! and leave the teardown to the background; the helpers the run and a
//! session call share (bounded status lines, output readers, usage without
//! a cgroup).

use std::time::Duration;

use anyhow::{anyhow, Context};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::cgroup::RunCgroup;
use super::launch::{launch, Launched};
use super::probe::uid_policy;
use super::pump::{self, isolation_details, processes_after, Pump, Scope};
use super::sandbox::{self, SandboxConfig};
use super::spare::{node_waiter, waiter_with};
use super::{netns, ProcessTier};
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::spec::{Language, RunSpec};
use crate::tier::contract::TierExit;

impl ProcessTier {
    pub(super) async fn run_inner(&self, spec: RunSpec, ctx: RunContext) -> anyhow::Result<TierExit> {
        ctx.emit(EventKind::Phase(Phase::Preparing)).await;
        let limits = spec.limits.clone();
        let mut warnings: Vec<String> = vec![];
        // A run with an allow list gets the egress listener's port in its
        // Landlock rules, which are applied before any program arrives: such
        // a run is built for itself (spares have no network).
        let egress = crate::egress::Egress::start(&spec, &self.egress, &ctx)?;
        let port = egress.as_ref().map(|_| crate::egress::SANDBOX_PORT);
        let mut env = spec.sandbox_env("/work", "/tmp");
        if let Some(eg) = &egress {
            env.extend(eg.sandbox_env(&spec.env, sandbox::SYSTEM_BUNDLE));
        }
        let run_ca = egress.as_ref().and_then(|e| e.ca_pem());
        let (spare, spare_gone) = if port.is_none() { self.take_spare(&spec) } else { (None, None) };
        if let Some(why) = spare_gone {
            ctx.note(format!("starting cold: the spare is gone ({why})")).await;
        }
        let (mut launched, start) = match spare {
            Some(mut l) => {
                if let Some(c) = &mut l.cg {
                    c.set_limits(&limits).context("cannot set the run's cgroup limits")?;
                }
                l.timeline = vec![("sandbox_taken", ctx.ms())];
                (l, "warm")
            }
            None => {
                // Built for this run: its interpreter (Python) starts ahead of
                // the program as in a spare, while init joins the cgroup.
                let waiter = match spec.language {
                    Language::Python => Some(waiter_with(&spec, env.clone())),
                    Language::Javascript => node_waiter(&spec, env.clone()),
                    Language::Sh => None,
                };
                let mut l = launch(&limits, waiter, port, run_ca, false, &self.shape(), ctx.started).await?;
                l.timeline.push(("helper_prepared", ctx.ms()));
                (l, "cold")
            }
        };
        warnings.extend(launched.warnings.iter().cloned());
        for w in &warnings {
            ctx.note(format!("warning: {w}")).await;
        }
        let nproc = if launched.cg.is_some() {
            None
        } else {
            // RLIMIT_NPROC counts every process of the real uid, so leave room
            // for the ones the user already has.
            Some(count_user_processes(nix::unistd::getuid().as_raw()) + limits.pids)
        };
        if let (Some(eg), Some(chan)) = (&egress, launched.net.take()) {
            let server = eg.server();
            eg.server().track(async move {
                if let Some(l) = netns::receive_listener(chan).await {
                    server.serve_listener(l);
                }
            });
        }
        launched.net = None;
        let config = SandboxConfig {
            code: spec.code.clone(),
            file_name: spec.language.program_file(&spec.code).into(),
            interpreter: spec.interpreter(),
            env,
            cpu_secs: limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64,
            data_limit: launched.cg.is_none().then_some(limits.memory_bytes),
            file_size_bytes: limits.file_size_bytes,
            disk_bytes: limits.disk_bytes,
            open_files: limits.open_files,
            nproc,
        };
        // Where the program's interpreter came from: forked from the warm
        // zygote when the run asks for exactly what it was started with.
        let interpreter = match &launched.zygote {
            Some(w) if w.runs_inline(&config) => "zygote fork",
            Some(_) => "fresh (exec'd by a zygote's process)",
            None => "fresh",
        };
        let result = self.execute(&spec, &ctx, config, &mut launched).await;
        ctx.emit(EventKind::Phase(Phase::TearingDown)).await;
        // Read once at the program's exit (in execute), not again here.
        let final_stats = launched.final_stats.take();
        // The program is gone and its output drained: the report need not wait
        // for the helper's exit and the cgroup's removal (awaited at shutdown;
        // a killed sandbench leaves them to the next start's reaper).
        crate::tier::background::spawn(launched.teardown());
        self.refill_after(Duration::from_millis(20));
        let network = match egress {
            Some(eg) => eg.finish().await,
            None => json!("none: an empty network namespace (no device but a loopback that is down)"),
        };
        let mut out = result?;
        out.details["network"] = network;
        // Which accounting the peak memory figure is (the README names it).
        out.details["memory_accounting"] = json!(if final_stats.is_some() {
            "cgroup peak"
        } else {
            "max RSS of the program's largest process (no cgroup)"
        });
        if let Some(s) = final_stats {
            // A run stopped from outside (output limit, timeout, cancel) has
            // no exit report, but the cgroup still counted what it used: that,
            // not the last sample (often the zeros of the first tick).
            let u = out.usage.get_or_insert_with(Default::default);
            {
                u.cpu_ms = s.cpu_ns.map(|n| n / 1_000_000).or(u.cpu_ms);
                u.pids = s.pids_peak.or(u.pids);
                // Peak memory is the sandbox's own accounting: the cgroup's
                // high-water mark, the figure its limit is enforced against.
                // Not the program's max RSS, which counts shared pages the
                // cgroup charged to whoever touched them first and so read
                // 24M under a 16M limit that held. Without a peak file (v2
                // before 5.19) the samples of the same counter stand.
                u.memory_bytes = s.memory_peak;
            }
        }
        if let Some(obj) = out.details.as_object_mut() {
            let used = obj.get("uid").cloned().unwrap_or(serde_json::Value::Null);
            obj.insert("uid_policy".into(), json!(uid_policy(self.uid_base, self.uid_count, &used)));
            obj.insert("warnings".into(), json!(warnings));
            obj.insert("start".into(), json!(start));
            if let (Some(why), "cold") = (spare_gone, start) {
                obj.insert("start_note".into(), json!(format!("spare gone: {why}")));
            }
            obj.insert("interpreter".into(), json!(interpreter));
        }
        Ok(out)
    }

    /// Hand the sandbox the program and follow it to its exit.
    pub(super) async fn execute(
        &self,
        spec: &RunSpec,
        ctx: &RunContext,
        config: SandboxConfig,
        launched: &mut Launched,
    ) -> anyhow::Result<TierExit> {
        let limits = &spec.limits;
        let mut stdin = launched.stdin.take().ok_or_else(|| anyhow!("helper has no stdin"))?;
        let payload = serde_json::to_vec(&config)?;
        // Dropped after the write: init reads the config up to EOF.
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });
        let (gate, open) = tokio::sync::watch::channel(false);
        let mut side = RunSide {
            out: tokio::spawn(read_output(launched.child.stdout.take(), Stream::Stdout, ctx.clone(), open.clone())),
            err: tokio::spawn(read_output(launched.child.stderr.take(), Stream::Stderr, ctx.clone(), open)),
            out_done: false,
            err_done: false,
            gate,
        };
        let start_by = tokio::time::Instant::now() + limits.wall_time;
        let mut pump = Pump::new(ctx, limits, Scope::Run { start_by });
        // Done once the program has exited and both its output pipes are
        // drained (EOF: every process holding them is gone), or the sandbox
        // is gone without saying so.
        pump.drive(launched, &mut side).await?;
        drop(launched.status.take());
        pump.timeline.push(("output_drained", ctx.ms()));
        let cg = launched.cg.as_ref();
        // A verdict is final only once no process of the run can exist: init
        // reaps every one before it reports the exit; a run stopped from here
        // (its helper killed, the namespace going down) is confirmed empty.
        if let Some(c) = cg.filter(|c| !c.members().is_empty()) {
            c.kill_all();
            if !c.members().is_empty() {
                ctx.note("processes of the run were still being torn down when it was judged").await;
            }
        }
        let _ = writer.await;
        let stats = cg.map(|c| c.stats());
        launched.final_stats = stats;
        let final_counters = pump.final_sample(stats).await;
        // Only sandbench's own code writes the status pipe (the program never
        // holds it): an error there means the sandbox was not built as
        // promised, whatever exit status followed (a failed setup step exits
        // 121 from the program's process).
        if let Some(msg) = pump.error.take() {
            return Err(anyhow!("{msg}"));
        }
        let Some(e) = pump.exited() else {
            if pump.killed || ctx.stop.is_cancelled() {
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                let after = processes_after(false, None, cg).await;
                let mut details = isolation_details(std::mem::take(&mut pump.isolation), cg, &pump.timeline);
                details["privileges"] = json!(launched.privileges);
                after.record(&mut details, ctx).await;
                return Ok(TierExit { usage: None, details });
            }
            return Err(anyhow!("the sandbox ended without reporting the program's exit (see the log)"));
        };
        let (cpu_ms, rss, status) = (e.cpu_ms, e.max_rss_kb * 1024, e.status);
        // Before the exit goes out: the verdict is about a run that ended whole.
        let after = processes_after(true, e.left, cg).await;
        let (mut details, _) = pump.conclude(e, status, final_counters, cg, launched, true).await;
        after.record(&mut details, ctx).await;
        Ok(TierExit { usage: Some(UsageSample { cpu_ms: Some(cpu_ms), memory_bytes: Some(rss), pids: None }), details })
    }
}

/// A one-shot run's side of the pump: the program's pipes are its own, read
/// to EOF by two tasks; a stop kills the helper and the run's cgroup.
struct RunSide {
    out: tokio::task::JoinHandle<()>,
    err: tokio::task::JoinHandle<()>,
    out_done: bool,
    err_done: bool,
    /// Opened by the pump once the run's "running" is out (or the program
    /// will never start): the readers send nothing before it.
    gate: tokio::sync::watch::Sender<bool>,
}

impl pump::Side for RunSide {
    async fn output_ready(&mut self) -> Stream {
        tokio::select! {
            _ = &mut self.out, if !self.out_done => { self.out_done = true; Stream::Stdout }
            _ = &mut self.err, if !self.err_done => { self.err_done = true; Stream::Stderr }
            else => std::future::pending().await,
        }
    }

    async fn take(&mut self, _: Stream, _: &RunContext) {}

    fn release_output(&mut self) {
        // Called on every turn of the pump once open: wake the readers once.
        self.gate.send_if_modified(|open| !std::mem::replace(open, true));
    }

    fn drained(&self) -> bool {
        self.out_done && self.err_done
    }

    async fn kill(&mut self, child: &mut tokio::process::Child, cg: Option<&RunCgroup>) {
        let _ = child.start_kill();
        if let Some(c) = cg {
            c.kill_all();
        }
    }
}

/// Read one of the program's pipes to EOF as output events.
pub(super) async fn read_output<R: AsyncRead + Unpin>(
    src: Option<R>,
    stream: Stream,
    ctx: RunContext,
    mut open: tokio::sync::watch::Receiver<bool>,
) {
    let Some(mut src) = src else { return };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match src.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Init says Started before the program can write, but this
                // task and the pump race to the run's events: wait for the
                // pump's "running" (a dropped gate also lets it through).
                let _ = open.wait_for(|o| *o).await;
                ctx.emit(EventKind::Output(stream, buf[..n].to_vec())).await;
            }
        }
    }
}

pub(super) fn count_user_processes(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
                .filter(|e| e.metadata().map(|m| m.uid() == uid).unwrap_or(false))
                .count() as u64
        })
        .unwrap_or(0)
}
