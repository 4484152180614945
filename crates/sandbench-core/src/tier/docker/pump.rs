//! The pump: one attached loader followed to its end, for a one-shot run and
//! a session call alike. It reads the loader's frames off the container's
//! attached stream (the program's output, the loader's status, the program's
//! start and exit, relay messages, a failure), samples the container's cgroup,
//! hands the judge its facts as they come and stops the program at its CPU
//! limit or when the run is stopped. What differs between a run and a call —
//! how a stop is asked for, what else can end the wait, the host's scratch
//! watch, the relay, the acknowledgement — is the caller's [`Side`]; what the
//! counters are measured from is the [`Scope`]. Concluding (the exit's facts
//! and wording, the details) stays with the caller.

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::cgroup::{sample_loop, Cgroup, Sample};
use super::container::{Frame, Frames};
use crate::event::{EventKind, ExitStatus, RunContext, Stream, UsageSample};
use crate::highwater;
use crate::judge::{self, ExitFacts, Judge};
use crate::session::counters_since;
use crate::spec::Limits;

/// After the container exited, how long the output stream may take to end.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// The container's attached output: the loader's frames on stdout, its own
/// failures on stderr.
pub(super) type Output = Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// Whose the container is while the pump follows it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope {
    /// A one-shot run's, whole: its cgroup's high-water mark is the run's
    /// peak memory, and its stream ends with it. `loader_tasks` are the
    /// cgroup's processes that are not the program's (the loader, and its
    /// relay thread with an allow list).
    Run { loader_tasks: u64 },
    /// A session call's: counters are what they gained since `base`, the
    /// cgroup's peak spans the session, and the stream goes on to the next
    /// call, so nothing may follow this call's last frame.
    Call { base: judge::Counters },
}

/// What happened beside the attached stream.
pub(super) enum Beside {
    /// A run's container exited: its output has [`OUTPUT_GRACE`] to end.
    Exited,
    /// A session's container is gone.
    Gone,
    /// Something did not happen in time: the stream is in no known state.
    Broken(String),
}

/// What a one-shot run and a session call each do around the pump.
pub(super) trait Side {
    /// Ask for the program to be stopped (cancel, CPU limit); an error means
    /// the stream can no longer be trusted.
    async fn kill(&mut self) -> Result<(), String>;
    /// The next thing that happens beside the stream; pending for ever when
    /// nothing more can. Must be cancel-safe.
    async fn beside(&mut self) -> Beside;
    /// The program's process exists (`guard`: the loader's descriptor of the
    /// scratch guard's listener); an error ends the run as not set up.
    fn started(&mut self, guard: Option<i32>) -> Result<(), String>;
    /// A message of the loader's egress relay; an error breaks the stream.
    async fn relay(&mut self, message: Vec<u8>) -> Result<(), String>;
    /// The program exited, before the cgroup's last look.
    async fn exited(&mut self, ctx: &RunContext, loader: &mut LoaderFacts);
    /// The loader's last frame is in: let it end.
    async fn acknowledge(&mut self) -> Result<(), String>;
}

/// The state of one attached run or call, and what the pump found.
pub(super) struct Pump<'a> {
    ctx: &'a RunContext,
    timeline: &'a mut Vec<(&'static str, f64)>,
    docker: Docker,
    id: String,
    scope: Scope,
    pub(super) cgroup: Option<Cgroup>,
    /// Whether the cgroup's pids are the program's (not on gVisor, where
    /// the host sees only the sandbox's own threads).
    guest_pids: bool,
    pub(super) judge: Judge,
    pub(super) loader: LoaderFacts,
    /// The cgroup's counters as last read (whole, not since `base`).
    pub(super) cg_counters: judge::Counters,
    pub(super) last: UsageSample,
    pub(super) peak_mem: Option<u64>,
    /// From the loader's own channel, which the program cannot write: the
    /// exit status and the bytes it read from the program's stdout and stderr.
    pub(super) reported: Option<(ExitStatus, u64, u64)>,
    pub(super) failed: Option<String>,
    pub(super) broken: Option<String>,
    pub(super) killed: bool,
    pub(super) cpu_killed: bool,
    /// A run's container exited / a session's container is gone.
    pub(super) exited: bool,
    pub(super) gone: bool,
    output_done: bool,
    /// Why the attached stream failed, if it did.
    pub(super) stream_error: Option<String>,
    pub(super) started_uid: Option<u32>,
    /// Output bytes delivered to the run, stdout and stderr.
    pub(super) delivered: [u64; 2],
    /// Mounts the loader found full when the call began (an earlier call
    /// filled them).
    pub(super) prior_full: Vec<String>,
    /// The loader's own failures (never the program's output), bounded.
    pub(super) loader_err: Vec<u8>,
}

impl<'a> Pump<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        ctx: &'a RunContext,
        limits: &Limits,
        timeline: &'a mut Vec<(&'static str, f64)>,
        docker: &Docker,
        id: &str,
        cgroup: Option<Cgroup>,
        guest_pids: bool,
        scope: Scope,
    ) -> Pump<'a> {
        let cg_counters = match scope {
            Scope::Run { .. } => judge::Counters::default(),
            Scope::Call { base } => base,
        };
        Pump {
            ctx,
            timeline,
            docker: docker.clone(),
            id: id.to_string(),
            scope,
            cgroup,
            guest_pids,
            judge: Judge::new(limits),
            loader: LoaderFacts::default(),
            cg_counters,
            last: UsageSample::default(),
            peak_mem: None,
            reported: None,
            failed: None,
            broken: None,
            killed: false,
            cpu_killed: false,
            exited: false,
            gone: false,
            output_done: false,
            stream_error: None,
            started_uid: None,
            delivered: [0; 2],
            prior_full: vec![],
            loader_err: vec![],
        }
    }

    fn base(&self) -> judge::Counters {
        match self.scope {
            Scope::Run { .. } => judge::Counters::default(),
            Scope::Call { base } => base,
        }
    }

    /// The judge's counters: the loader's counts with the cgroup's, this
    /// run's or call's share.
    pub(super) fn counters(&self) -> judge::Counters {
        self.loader.counters(counters_since(self.cg_counters, self.base()))
    }

    /// The exit's facts: `status` with the counters and what the loader and
    /// the host's watch found.
    pub(super) fn facts(&self, status: ExitStatus, counters: judge::Counters) -> ExitFacts {
        ExitFacts {
            status,
            counters,
            rlimit_signals_trusted: false,
            capped_files: self.loader.fsize.clone(),
            full_mounts: self.loader.disk.clone(),
            bounds: self.loader.bounds.clone(),
        }
    }

    /// The cgroup's counters now (the program is gone: they are final).
    pub(super) fn final_counters(&mut self) {
        if let Some(cg) = &self.cgroup {
            self.cg_counters = self.cg_counters.max(cg.sample(self.guest_pids).counters);
        }
    }

    fn over(&self) -> bool {
        let call = matches!(self.scope, Scope::Call { .. });
        self.reported.is_some()
            || self.failed.is_some()
            || self.broken.is_some()
            || self.gone
            // A run's stream may end before its container's wait says so;
            // a session's stream ends only with its container.
            || (self.output_done && (self.exited || call))
    }

    async fn kill<S: Side>(&mut self, side: &mut S) {
        if let Err(why) = side.kill().await {
            self.broken.get_or_insert(why);
        }
    }

    /// Follow the loader until its last frame (exit or failure), a broken
    /// stream, or the container's end; then let the loader end.
    pub(super) async fn drive<S: Side>(&mut self, output: &mut Output, frames: &mut Frames, side: &mut S) {
        let ctx = self.ctx;
        let (sample_tx, mut sample_rx) = mpsc::channel::<Sample>(4);
        let sampler = tokio::spawn(sample_loop(
            self.docker.clone(),
            self.id.clone(),
            self.cgroup.clone(),
            self.guest_pids,
            sample_tx,
        ));
        let grace = tokio::time::sleep(Duration::from_secs(86_400 * 365));
        tokio::pin!(grace);
        while !self.over() {
            tokio::select! {
                item = output.next(), if !self.output_done => match item {
                    Some(Ok(LogOutput::StdOut { message })) => self.frames(frames, &message, side).await,
                    Some(Ok(LogOutput::StdErr { message })) => {
                        let room = 4096usize.saturating_sub(self.loader_err.len());
                        self.loader_err.extend_from_slice(&message[..message.len().min(room)]);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::debug!("attach stream: {e}");
                        self.stream_error = Some(e.to_string());
                        self.output_done = true;
                    }
                    None => self.output_done = true,
                },
                b = side.beside() => match b {
                    Beside::Exited => {
                        self.exited = true;
                        grace.as_mut().reset(tokio::time::Instant::now() + OUTPUT_GRACE);
                    }
                    Beside::Gone => self.gone = true,
                    Beside::Broken(why) => self.broken = Some(why),
                },
                _ = &mut grace, if self.exited && !self.output_done => {
                    tracing::debug!("output stream did not end after the container exited");
                    self.output_done = true;
                }
                _ = ctx.stop.cancelled(), if !self.killed => {
                    self.killed = true;
                    self.kill(side).await;
                }
                Some(s) = sample_rx.recv() => self.sample(s, side).await,
            }
        }
        sampler.abort();
        if let (Scope::Run { .. }, Some(cg)) = (self.scope, &self.cgroup) {
            // The cgroup's high-water mark once more, while it is still
            // there: a bomb killed between two samples peaked after the last.
            if let Some(p) = cg.sample(self.guest_pids).peak {
                self.peak_mem = Some(self.peak_mem.map_or(p, |m| m.max(p)));
            }
        }
        if (self.reported.is_some() || self.failed.is_some()) && self.broken.is_none() {
            if let Err(why) = side.acknowledge().await {
                self.broken = Some(why);
            }
        }
    }

    async fn frames<S: Side>(&mut self, frames: &mut Frames, chunk: &[u8], side: &mut S) {
        let ctx = self.ctx;
        let call = matches!(self.scope, Scope::Call { .. });
        for frame in frames.feed(chunk) {
            if call && (self.reported.is_some() || self.failed.is_some()) {
                // Nothing comes after a call's last frame.
                self.broken = Some("frames after the call's end".into());
                return;
            }
            match frame {
                Frame::Stdout(b) => {
                    self.delivered[0] += b.len() as u64;
                    ctx.emit(EventKind::Output(Stream::Stdout, b)).await
                }
                Frame::Stderr(b) => {
                    self.delivered[1] += b.len() as u64;
                    ctx.emit(EventKind::Output(Stream::Stderr, b)).await
                }
                Frame::Status(found) => {
                    for m in found.get("prior").and_then(|v| v.as_array()).into_iter().flatten() {
                        if let Some(m) = m.as_str() {
                            self.prior_full.push(crate::sanitize::inert_line(m, 80));
                        }
                    }
                    self.loader.absorb(&found);
                    let counters = self.counters();
                    self.judge.sample(ctx, &counters).await;
                }
                Frame::Started { uid, guard } => {
                    self.timeline.push(("program_started", ctx.ms()));
                    self.started_uid = Some(uid);
                    if let Err(why) = side.started(guard) {
                        // Guarded calls would wait for ever: end it.
                        self.failed = Some(why);
                        if !self.killed {
                            self.killed = true;
                            self.kill(side).await;
                        }
                    }
                }
                Frame::Net(m) => {
                    if let Err(why) = side.relay(m).await {
                        frames.broken = Some(why);
                    }
                }
                Frame::Failed(why) => self.failed = Some(why),
                Frame::Exit { status, stdout_bytes, stderr_bytes } => {
                    self.timeline.push(("program_exited", ctx.ms()));
                    self.reported = Some((status, stdout_bytes, stderr_bytes));
                    side.exited(ctx, &mut self.loader).await;
                    // Every process of the program is gone and the container
                    // is still up (the loader waits for the acknowledgement):
                    // the cgroup's counters are final now, including OOM kills
                    // of children the program survived.
                    self.final_counters();
                }
            }
        }
        if let Some(why) = frames.broken.clone() {
            self.broken = Some(why);
        } else if call && (self.reported.is_some() || self.failed.is_some()) && frames.pending() != 0 {
            self.broken = Some("bytes after the call's last frame".into());
        }
    }

    async fn sample<S: Side>(&mut self, s: Sample, side: &mut S) {
        let ctx = self.ctx;
        let mut u = s.usage;
        let peak = match self.scope {
            // Samples after the container exited are of a container that is gone.
            Scope::Run { .. } if self.exited => return,
            Scope::Run { loader_tasks } => {
                u.pids = u.pids.map(|p| p.saturating_sub(loader_tasks));
                s.peak.or(u.memory_bytes)
            }
            Scope::Call { base } => {
                u.cpu_ms = u.cpu_ms.map(|c| c.saturating_sub(base.cpu_ms.unwrap_or(0)));
                u.memory_bytes
            }
        };
        self.last = u;
        if let Some(m) = peak {
            self.peak_mem = Some(self.peak_mem.map_or(m, |p| p.max(m)));
        }
        ctx.usage(u).await;
        self.cg_counters = self.cg_counters.max(s.counters);
        let counters = self.counters();
        if self.judge.sample(ctx, &counters).await == judge::Action::KillForCpu && !self.killed {
            self.killed = true;
            self.cpu_killed = true;
            self.kill(side).await;
        }
    }
}

/// What the loader reported from inside the container.
#[derive(Debug, Default)]
pub(super) struct LoaderFacts {
    pids_refused: u64,
    pub(super) fsize: Vec<String>,
    pub(super) disk: Vec<String>,
    /// Bounds the loader's walk or the host's watch hit.
    pub(super) bounds: Vec<judge::BoundHit>,
}

impl LoaderFacts {
    /// The host watch's findings (names as the sandbox sees them).
    pub(super) fn absorb_found(&mut self, found: highwater::Found) {
        for f in found.capped {
            if self.fsize.len() < 16 && !self.fsize.contains(&f) {
                self.fsize.push(f);
            }
        }
        for d in found.full {
            if self.disk.len() < 16 && !self.disk.contains(&d) {
                self.disk.push(d);
            }
        }
        self.add_bounds(found.bounds);
    }

    fn add_bounds(&mut self, bounds: impl IntoIterator<Item = judge::BoundHit>) {
        for b in bounds {
            if self.bounds.len() < 16 && !self.bounds.contains(&b) {
                self.bounds.push(b);
            }
        }
    }

    fn absorb(&mut self, found: &serde_json::Value) {
        if found.get("pids").and_then(|v| v.as_u64()).is_some() {
            self.pids_refused = self.pids_refused.max(1);
        }
        let names = |key: &str| -> Vec<String> {
            found
                .get(key)
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|d| d.as_str()).take(16).map(str::to_string).collect())
                .unwrap_or_default()
        };
        for f in names("fsize") {
            if self.fsize.len() < 16 && !self.fsize.contains(&f) {
                self.fsize.push(f);
            }
        }
        for d in names("disk") {
            if self.disk.len() < 16 && !self.disk.contains(&d) {
                self.disk.push(d);
            }
        }
        self.add_bounds(names("bound").iter().map(|b| judge::BoundHit::parse(b)));
    }

    /// The loader's counts combined with the host's cgroup counters.
    pub(super) fn counters(&self, cg: judge::Counters) -> judge::Counters {
        let max = |a: Option<u64>, b: u64| Some(a.unwrap_or(0).max(b));
        judge::Counters {
            cpu_ms: cg.cpu_ms,
            oom_kills: cg.oom_kills,
            memory_limit_hits: cg.memory_limit_hits,
            pids_refused: max(cg.pids_refused, self.pids_refused),
        }
    }
}
