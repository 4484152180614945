//! One program through envd, for a one-shot run and a session call alike:
//! the command that sets the rlimits, then upload, start and stream to the
//! exit. Its own file because a session calls it as well as the tier.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::anyhow;

use super::envd::{self, Envd, ProcEvent};
use crate::event::{EventKind, ExitStatus, Phase, RunContext, Stream, UsageSample, ViolationKind};
use crate::spec::{format_size, RunSpec};

/// Where the program lives inside the sandbox (the template's user home).
pub(crate) const WORK_DIR: &str = "/home/user/sandbench";
const METRICS_EVERY: Duration = Duration::from_millis(500);
/// How long after the wall time envd's own deadline kills the program (if
/// sandbench's kill did not arrive); never later than the sandbox's timeout.
const ENVD_DEADLINE_GRACE: Duration = Duration::from_secs(5);

/// The command envd starts, the way the SDK's `commands.run` starts one:
/// `/bin/bash -l -c <script>` (a login shell, so the template's profile sets
/// the environment E2B users expect). The script sets the rlimits E2B can
/// honour, then execs the interpreter on the uploaded file so that signals and
/// the exit are the program's. An `sh` program is not handed to bash as the
/// script text (what `commands.run(code)` would do): it runs as a file under
/// `/bin/sh`, the interpreter it gets on every other tier, after the limits.
pub(crate) fn command(spec: &RunSpec) -> (String, Vec<String>) {
    let l = &spec.limits;
    let file = format!("{WORK_DIR}/{}", spec.language.program_file(&spec.code));
    let interp = spec.interpreter().join(" ");
    // The CPU hard limit sits one second above the soft one: at the soft
    // limit the kernel sends SIGXCPU (reported as a cpu_time violation); with
    // soft == hard it would SIGKILL, indistinguishable from any other kill.
    let cpu = l.cpu_time.as_secs_f64().ceil().max(1.0) as u64;
    let script = format!(
        "ulimit -S -t {cpu} && ulimit -H -t {} && ulimit -f {} && ulimit -n {} && exec {interp} {file}",
        cpu + 1,
        l.file_size_bytes.div_ceil(1024).max(1),
        l.open_files,
    );
    ("/bin/bash".into(), vec!["-l".into(), "-c".into(), script])
}

#[derive(Default)]
pub(super) struct Usage {
    pub(super) peak_memory: Option<u64>,
    pub(super) sampled: bool,
}

/// Upload, start, stream; returns once the program ended or was stopped.
pub(super) async fn execute(
    envd: &Envd,
    spec: &RunSpec,
    ctx: &RunContext,
    timeout_margin: Duration,
) -> anyhow::Result<Usage> {
    let file = format!("{WORK_DIR}/{}", spec.language.program_file(&spec.code));
    tokio::select! {
        r = envd.upload(&file, spec.code.as_bytes()) => r?,
        _ = ctx.stop.cancelled() => {
            ctx.emit(EventKind::Exit(ExitStatus::default())).await;
            return Ok(Usage::default());
        }
    }
    let (cmd, args) = command(spec);
    let envs: BTreeMap<String, String> = spec.sandbox_env("/home/user", "/tmp").into_iter().collect();
    let deadline = spec.limits.wall_time + ENVD_DEADLINE_GRACE.min(timeout_margin);
    let mut stream = tokio::select! {
        r = envd.start(&cmd, &args, &envs, WORK_DIR, Some(deadline)) => r?,
        _ = ctx.stop.cancelled() => {
            ctx.emit(EventKind::Exit(ExitStatus::default())).await;
            return Ok(Usage::default());
        }
    };
    let mut ticker = tokio::time::interval(METRICS_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut usage = Usage::default();
    let mut metrics_ok = true;
    let mut started = false;
    let mut end: Option<envd::EndInfo> = None;
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Ok(Some(ProcEvent::Start { .. })) => {
                    if !started {
                        started = true;
                        ctx.emit(EventKind::Phase(Phase::Running)).await;
                    }
                }
                Ok(Some(ProcEvent::Stdout(b))) => ctx.emit(EventKind::Output(Stream::Stdout, b)).await,
                Ok(Some(ProcEvent::Stderr(b))) => ctx.emit(EventKind::Output(Stream::Stderr, b)).await,
                Ok(Some(ProcEvent::End(e))) => end = Some(e),
                Ok(Some(ProcEvent::KeepAlive)) => {}
                Ok(None) => break,
                Err(e) => {
                    if end.is_some() {
                        // The exit arrived; only the trailer was lost.
                        ctx.note(format!("warning: {e}")).await;
                        break;
                    }
                    return Err(e.into());
                }
            },
            _ = ctx.stop.cancelled() => {
                // Dropping the stream abandons the call; killing the sandbox
                // (next, in run_inner) kills the program with it.
                ctx.emit(EventKind::Exit(ExitStatus { code: None, signal: Some(libc::SIGKILL) })).await;
                return Ok(usage);
            }
            _ = ticker.tick(), if metrics_ok && started => {
                match envd.metrics().await {
                    Some(m) => {
                        let mem = m.get("mem_used").and_then(|v| v.as_u64());
                        if mem.is_some() {
                            usage.sampled = true;
                            usage.peak_memory = usage.peak_memory.max(mem);
                            ctx.usage(UsageSample { cpu_ms: None, memory_bytes: mem, pids: None }).await;
                        }
                    }
                    None => metrics_ok = false,
                }
            }
        }
    }
    let Some(end) = end else {
        return Err(anyhow!("envd ended the process stream without the program's exit status"));
    };
    if !started {
        ctx.emit(EventKind::Phase(Phase::Running)).await;
    }
    if let Some(err) = end.error.as_deref().filter(|e| !e.is_empty()) {
        ctx.note(format!("envd: {}", crate::http::message_line(err, 200))).await;
    }
    let signal = envd::signal_from_status(&end.status);
    let x = if let Some(sig) = signal {
        ExitStatus { code: None, signal: Some(sig) }
    } else {
        ExitStatus { code: Some(end.exit_code), signal: None }
    };
    match signal {
        Some(libc::SIGXCPU) => {
            ctx.violation(
                ViolationKind::CpuTime,
                format!(
                    "CPU time limit {} hit — killed (SIGXCPU, per-process rlimit)",
                    crate::spec::format_duration(spec.limits.cpu_time)
                ),
            )
            .await
        }
        Some(libc::SIGXFSZ) => {
            ctx.violation(
                ViolationKind::FileSize,
                format!("file size limit {} hit — killed (SIGXFSZ)", format_size(spec.limits.file_size_bytes)),
            )
            .await
        }
        _ => {}
    }
    ctx.emit(EventKind::Exit(x)).await;
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Language;

    #[test]
    fn command_sets_rlimits_and_execs() {
        let spec = RunSpec::new(Language::Python, "print(1)");
        let (cmd, args) = command(&spec);
        assert_eq!(cmd, "/bin/bash");
        assert_eq!(args[..2], ["-l", "-c"]);
        assert!(args[2].contains("ulimit -S -t 5"), "{}", args[2]);
        assert!(args[2].contains("ulimit -f 16384"), "{}", args[2]);
        assert!(args[2].ends_with("exec python3 -u /home/user/sandbench/main.py"), "{}", args[2]);
    }
}
