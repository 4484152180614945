//! One program in a guest, followed to its exit: the request sent to the
//! agent, its frames read, the judge fed, the CPU bounded by what QEMU got.
//! For a one-shot run and a session's call alike; its own file because a
//! session (`session.rs`) calls it as well as the tier (`mod.rs`).

use std::time::Duration;

use anyhow::anyhow;
use serde_json::json;

use super::proto::{self, Frame, Item};
use super::vm::Guest;
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample};
use crate::judge::{self, ExitFacts, Judge};
use crate::spec::RunSpec;

/// How long the agent may take to end a call's program after KILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(15);

/// The limits the agent applies to a call's program.
pub(super) fn guest_limits(limits: &crate::spec::Limits) -> proto::GuestLimits {
    proto::GuestLimits {
        // The host enforces the CPU limit (see `VmCpu`); the agent's own
        // kill is a backstop far above it.
        cpu_ms: (limits.cpu_time.as_millis() as u64).saturating_mul(CPU_BACKSTOP),
        memory_bytes: limits.memory_bytes,
        pids: limits.pids,
        file_size_bytes: limits.file_size_bytes,
        disk_bytes: limits.disk_bytes,
        open_files: limits.open_files,
    }
}

/// Send the program and follow it to its exit (or until stopped).
/// `session`: a session's call (`session.rs`), begun at this host time;
/// stopping it asks the agent to kill the program and waits for its
/// exit, instead of killing the guest.
pub(super) async fn execute(
    spec: &RunSpec,
    ctx: &RunContext,
    guest: &mut Guest,
    egress: Option<&crate::egress::Egress>,
    session: Option<f64>,
    timeline: &mut Vec<(&'static str, f64)>,
) -> anyhow::Result<(Option<UsageSample>, u64, serde_json::Value)> {
    let limits = &spec.limits;
    // The guest's random seed: a run without one does not happen.
    let seed = anyhow::Context::context(crate::host::random_hex(32), "cannot read /dev/urandom for the guest's seed")?;
    let mut env = spec.sandbox_env("/work", "/tmp");
    if let Some(eg) = egress {
        env.extend(eg.sandbox_env(&spec.env, crate::egress::TMP_CA_BUNDLE));
    }
    let req = proto::RunRequest {
        language: spec.language.name().into(),
        file: spec.language.program_file(&spec.code).into(),
        code: spec.code.clone(),
        env,
        net_port: egress.map(|_| crate::egress::SANDBOX_PORT),
        ca: egress.and_then(|e| e.ca_pem()),
        limits: guest_limits(limits),
        seed,
        now: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        session_since: session,
        argv: if spec.language == crate::spec::Language::Sh { spec.interpreter() } else { vec![] },
    };
    let vm_cpu = VmCpu::start(guest.pid());
    guest.send(&proto::encode_run(&req)).await?;
    let sent = ctx.ms();
    timeline.push(("program_sent", sent));
    let mut kill_sent = false;
    let kill_grace = tokio::time::sleep(std::time::Duration::from_secs(86_400 * 365));
    tokio::pin!(kill_grace);
    let mut judge = Judge::new(limits);
    let mut garbage = 0u64;
    let exit: proto::GuestExit;
    let mut last = UsageSample::default();
    loop {
        let item = tokio::select! {
            it = guest.next() => it,
            _ = ctx.stop.cancelled(), if session.is_some() && !kill_sent => {
                kill_sent = true;
                guest.send(&proto::encode(proto::K_KILL, b"k")).await?;
                kill_grace.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
                continue;
            }
            _ = &mut kill_grace => {
                if session.is_some() {
                    anyhow::bail!("the guest did not end the call's program after sandbench asked it to");
                }
                // A one-shot guest ends with its program.
                guest.start_kill();
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                return Ok((None, garbage, serde_json::Value::Null));
            }
            _ = ctx.stop.cancelled(), if session.is_none() => {
                guest.start_kill();
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                return Ok((None, garbage, serde_json::Value::Null));
            }
        };
        let Some(item) = item else {
            if ctx.stop.is_cancelled() {
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                return Ok((None, garbage, serde_json::Value::Null));
            }
            let tail = guest.console_tail(6);
            return Err(anyhow!(
                "the guest died before the program's exit{}",
                if tail.is_empty() { String::new() } else { format!(" (console: {tail})") }
            ));
        };
        match item {
            Item::Frame(Frame::Started) => {
                timeline.push(("program_started", ctx.ms()));
                ctx.emit(EventKind::Phase(Phase::Running)).await;
                ctx.usage(UsageSample { cpu_ms: None, memory_bytes: None, pids: Some(1) }).await;
            }
            Item::Frame(Frame::Stdout(b)) => ctx.emit(EventKind::Output(Stream::Stdout, b)).await,
            Item::Frame(Frame::Stderr(b)) => ctx.emit(EventKind::Output(Stream::Stderr, b)).await,
            Item::Frame(Frame::Usage(u)) => {
                let cpu_ms = vm_cpu.bound(u.cpu_ms);
                last = UsageSample { cpu_ms, memory_bytes: u.memory_bytes, pids: u.pids };
                ctx.usage(last).await;
                let counters = judge::Counters {
                    cpu_ms,
                    oom_kills: u.oom_kills,
                    memory_limit_hits: u.memory_max_events,
                    pids_refused: u.pids_max_events,
                };
                if judge.sample(ctx, &counters).await == judge::Action::KillForCpu && !kill_sent {
                    // The agent ends the program and still reports its exit.
                    kill_sent = true;
                    guest.send(&proto::encode(proto::K_KILL, b"k")).await?;
                    kill_grace.as_mut().reset(tokio::time::Instant::now() + KILL_GRACE);
                }
            }
            Item::Frame(Frame::Log(l)) => {
                ctx.note(format!("guest: {}", crate::sanitize::visible_controls(l.as_bytes()))).await
            }
            Item::Frame(Frame::Exit(x)) => {
                timeline.push(("program_exited", ctx.ms()));
                // The guest's own steps, placed on this timeline as if
                // RUN reached the agent the moment it was sent (the
                // serial port's transit is in the host's next step).
                for (k, ms) in x.steps.as_deref().map(proto::guest_steps).unwrap_or_default() {
                    timeline.push((k, sent + ms));
                }
                exit = *x;
                break;
            }
            Item::Frame(Frame::Ready(_)) | Item::Frame(Frame::Pong) => {}
            Item::Garbage { bytes, reason } => {
                if garbage == 0 {
                    ctx.note(format!("guest sent bytes outside the protocol ({reason}); ignored")).await;
                }
                garbage += bytes as u64;
            }
            Item::Invalid { kind, reason } => {
                if garbage == 0 {
                    ctx.note(format!("guest sent an invalid frame (kind {kind:#x}: {reason}); ignored")).await;
                }
                garbage += 1;
            }
        }
    }
    let x = exit;
    if let Some(why) = &x.refused {
        anyhow::bail!(
            "the guest agent did not start the program: {} (a session stays open: free space in /work and call again)",
            crate::sanitize::inert_line(why, 200)
        );
    }
    if let Some(prior) = x.prior_full.as_deref().filter(|p| !p.is_empty()) {
        ctx.note(format!(
            "scratch space already full when this call began (an earlier call filled it): {}",
            crate::sanitize::inert_line(prior, 80)
        ))
        .await;
    }
    let status = ExitStatus { code: x.code, signal: x.signal };
    let cpu_ms = vm_cpu.bound(x.cpu_ms).or(last.cpu_ms);
    let facts = ExitFacts {
        status,
        counters: judge::Counters {
            // The same bounded counter the kill above was decided on.
            cpu_ms,
            oom_kills: x.oom_kills,
            memory_limit_hits: x.memory_max_events,
            pids_refused: x.pids_max_events,
        },
        rlimit_signals_trusted: false,
        capped_files: x.fsize_hit.iter().cloned().collect(),
        full_mounts: match (&x.full_mounts, x.disk_full) {
            (Some(m), _) if !m.is_empty() => m.split(", ").map(str::to_string).collect(),
            (_, true) => vec!["/work or /tmp".into()],
            _ => vec![],
        },
        // Guest text: a bounded few, each parsed into a known bound (or
        // `judge_bound`), its place made inert.
        bounds: x.incomplete.iter().take(8).map(|b| judge::BoundHit::parse(b)).collect(),
    };
    judge.exit(ctx, &facts).await;
    ctx.emit(EventKind::Exit(status)).await;
    let usage = UsageSample { cpu_ms, memory_bytes: x.memory_peak.or(last.memory_bytes), pids: x.pids_peak };
    let watch = json!({ "from": "guest agent", "file_events": x.file_events, "guarded_calls": x.guarded_calls });
    Ok((Some(usage), garbage, watch))
}

/// The guest agent's own CPU kill sits this many times above the run's CPU
/// limit: the host kills at the limit, from the bounded counter.
const CPU_BACKSTOP: u64 = 8;

/// The CPU the host gave the VM since a program was sent: an upper bound on
/// what the program can have used. Under TCG a guest cannot tell when its
/// vCPU thread was not scheduled on the host (no steal time), so the
/// scheduler's clock charges those gaps to the running program: on a loaded
/// host a guest's cgroup counted 6.2 s for a benign program. The program's
/// CPU is the guest's count, bounded by QEMU's (every thread's user and
/// system time, from `/proc/<pid>/stat`; QEMU is a child sandbench has not
/// reaped, so the pid is still QEMU's).
struct VmCpu {
    pid: Option<u32>,
    base_ms: Option<u64>,
}

impl VmCpu {
    fn start(pid: Option<u32>) -> VmCpu {
        VmCpu { pid, base_ms: pid.and_then(process_cpu_ms) }
    }

    /// The guest's figure, bounded by what QEMU used meanwhile (the guest's
    /// alone when QEMU's cannot be read).
    fn bound(&self, guest_ms: Option<u64>) -> Option<u64> {
        let used = match (self.base_ms, self.pid.and_then(process_cpu_ms)) {
            (Some(b), Some(now)) => Some(now.saturating_sub(b)),
            _ => None,
        };
        match (guest_ms, used) {
            (Some(g), Some(u)) => Some(g.min(u)),
            (g, _) => g,
        }
    }
}

/// A process's CPU time (user + system, all its threads), ms.
fn process_cpu_ms(pid: u32) -> Option<u64> {
    Some(crate::host::ProcStat::of(i32::try_from(pid).ok()?)?.cpu_ms())
}

#[cfg(test)]
mod cpu_bound_tests {
    use super::*;

    #[test]
    fn the_guest_figure_is_bounded_by_what_qemu_got() {
        let me = std::process::id();
        let c = VmCpu::start(Some(me));
        // A guest that counted a starved vCPU's gaps: far above what this
        // process used since.
        let b = c.bound(Some(3_600_000)).unwrap();
        assert!(b < 3_600_000, "{b}");
        // A guest count below what the VM used stands.
        assert_eq!(c.bound(Some(0)), Some(0));
        // Unreadable: the guest's figure as it is.
        assert_eq!(VmCpu { pid: None, base_ms: None }.bound(Some(7)), Some(7));
        assert_eq!(c.bound(None), None);
    }
}
