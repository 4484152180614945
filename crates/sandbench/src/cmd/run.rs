//! `sandbench run`: one program, live output, then a summary or one JSON report.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cli::{Format, RunArgs};
use crate::config::Config;
use crate::event::{EventKind, Stream};
use crate::report::{Outcome, RunReport};
use crate::runner::Update;
use crate::spec::{Language, RunSpec};
use crate::{runner, sanitize, tier, units};

use super::usage;

/// Read the program and build its spec from the flags and the config.
pub fn load_spec(path: &Path, lang: Option<Language>, config: &Config) -> anyhow::Result<RunSpec> {
    let code = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| usage(format!("cannot read the program from standard input: {e}")))?;
        s
    } else {
        let bytes = std::fs::read(path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
        String::from_utf8(bytes).map_err(|_| usage(format!("{} is not UTF-8 text", path.display())))?
    };
    if code.trim().is_empty() {
        return Err(usage(format!("{} is empty: nothing to run", display(path))));
    }
    let language = match lang.or_else(|| Language::from_path(path)) {
        Some(l) => l,
        None => {
            return Err(usage(format!(
                "cannot tell the language of {} from its name; pass --lang python, --lang sh or --lang javascript",
                display(path)
            )))
        }
    };
    let mut spec = RunSpec::new(language, code);
    spec.limits = config.limits.clone();
    spec.label = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "-".into());
    Ok(spec)
}

fn display(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

pub async fn run(args: RunArgs, config: &Config) -> anyhow::Result<i32> {
    let tier_name = args.tier.clone().unwrap_or_else(|| config.default_tier.clone());
    // One run and out: a spare sandbox for a next run would only be torn down.
    let mut one_shot = config.clone();
    one_shot.process.spare = false;
    // Nor a zygote (`tier/process/zygote.rs`): its start pays off from the second run.
    one_shot.process.zygote = false;
    one_shot.process.allow_degraded |= args.allow_degraded;
    let tier = tier::by_name(&tier_name, &one_shot).map_err(|e| usage(e.to_string()))?;
    let mut spec = load_spec(&args.file, args.lang, config)?;
    spec.limits = args.limits.apply(spec.limits);
    spec.env.extend(args.env.iter().cloned());
    tier.check_limits(&spec.limits).map_err(usage)?;
    if !args.secrets.is_empty() {
        spec.secrets = secrets(&args, config)?;
        tier::check_secrets(&tier_name, &spec.secrets).map_err(usage)?;
        spec.secrets.check(&spec.limits.network, &spec.env).map_err(usage)?;
    }

    let logged = spec.clone();
    let mut handle = runner::start(tier, spec);
    // Ctrl-C cancels the run (and so cleans it up) instead of killing us mid-way.
    let canceller = handle.canceller();
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::SeqCst);
            canceller.cancel();
        }
    });
    let text = args.format == Format::Text;
    let tty_out = std::io::stdout().is_terminal();
    let tty_err = std::io::stderr().is_terminal();
    let mut report: Option<RunReport> = None;
    // sandbench's own lines never split one of the program's: while its last
    // line is unfinished they wait for it to end (at most NOTICE_WAIT, for a
    // program that never ends its line), then start on a line of their own.
    let mut notices = Notices::new(|line: &str| eprintln!("{line}"));
    loop {
        let update = tokio::select! {
            u = handle.events.recv() => u,
            _ = notices.overdue() => {
                notices.flush(true);
                continue;
            }
        };
        let Some(update) = update else { break };
        let ev = match update {
            Update::Finished(r) => {
                report = Some(*r);
                continue;
            }
            Update::Event(ev) => ev,
        };
        match ev.kind {
            EventKind::Output(stream, bytes) if text => {
                let tty = match stream {
                    Stream::Stdout => tty_out,
                    Stream::Stderr => tty_err,
                };
                // A terminal gets the program's bytes with every control made
                // visible; a pipe or file gets them exactly.
                let data = if tty { sanitize::visible_controls(&bytes).into_bytes() } else { bytes };
                notices.output(&data, |part| {
                    let _ = match stream {
                        Stream::Stdout => std::io::stdout().write_all(part).and_then(|_| std::io::stdout().flush()),
                        Stream::Stderr => std::io::stderr().write_all(part),
                    };
                });
            }
            // Each refusal gets its own network line below.
            EventKind::Violation(v) if text && v.kind == crate::event::ViolationKind::Network => {}
            // An allowed connection is shown when it opens, not again when it ends.
            EventKind::Network(rec) if text && (rec.open || rec.decision != crate::egress::Decision::Allowed) => {
                notices.push(format!(
                    "sandbench: network — {} (at {})",
                    sanitize::visible_controls(rec.line().as_bytes()),
                    units::duration_ms(rec.at_ms)
                ));
            }
            EventKind::Violation(v) if text => {
                notices.push(format!(
                    "sandbench: {} — {} (at {})",
                    v.kind.name(),
                    sanitize::visible_controls(v.detail.as_bytes()),
                    units::duration_ms(v.at_ms)
                ));
            }
            EventKind::Note(n) if text => {
                notices.push(format!("sandbench: {}", sanitize::visible_controls(n.as_bytes())))
            }
            EventKind::Incomplete(b) if text => {
                notices.push(format!("sandbench: incomplete — {}", sanitize::visible_controls(b.detail.as_bytes())))
            }
            _ => {}
        }
    }
    // The program is done: what waited is shown now, and the summary below
    // starts on a line of its own.
    notices.finish();
    let Some(report) = report else {
        anyhow::bail!("the run ended without a report (see the log)");
    };
    crate::runlog::record(&logged, &report, None);
    match args.format {
        Format::Json => super::emit_json(&report.versioned())?,
        Format::Text => eprintln!("{}", summary(&report)),
    }
    Ok(exit_code(&report, interrupted.load(Ordering::SeqCst)))
}

/// How long a notice waits for the program to end its line.
const NOTICE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// sandbench's live lines in text mode, kept out of the program's lines: a
/// notice that comes while the program's last line (on either stream: both
/// usually share one terminal) is unfinished waits until a line ends, or
/// NOTICE_WAIT has passed, and never splits a line otherwise.
struct Notices<E: FnMut(&str)> {
    /// Writes one of sandbench's lines (without its newline).
    emit: E,
    /// The program's last byte written was not a newline.
    mid_line: bool,
    waiting: Vec<String>,
    since: Option<tokio::time::Instant>,
}

impl<E: FnMut(&str)> Notices<E> {
    fn new(emit: E) -> Self {
        Notices { emit, mid_line: false, waiting: Vec::new(), since: None }
    }

    fn push(&mut self, line: String) {
        self.waiting.push(line);
        if !self.mid_line {
            self.flush(false);
        } else if self.since.is_none() {
            self.since = Some(tokio::time::Instant::now());
        }
    }

    /// Write the program's bytes with `write`, letting waiting notices out
    /// right after the last line the bytes finish.
    fn output(&mut self, data: &[u8], mut write: impl FnMut(&[u8])) {
        let Some(&last) = data.last() else { return };
        match data.iter().rposition(|&b| b == b'\n') {
            Some(end) if !self.waiting.is_empty() => {
                write(&data[..=end]);
                self.mid_line = false;
                self.flush(false);
                write(&data[end + 1..]);
            }
            _ => write(data),
        }
        self.mid_line = last != b'\n';
    }

    /// Show what waits; `force` ends an unfinished line of the program first.
    fn flush(&mut self, force: bool) {
        if self.waiting.is_empty() || (self.mid_line && !force) {
            return;
        }
        if std::mem::take(&mut self.mid_line) {
            (self.emit)("");
        }
        for line in self.waiting.drain(..) {
            (self.emit)(&line);
        }
        self.since = None;
    }

    /// The program's output is over: end its last line and show what waits.
    fn finish(&mut self) {
        self.flush(true);
        if std::mem::take(&mut self.mid_line) {
            (self.emit)("");
        }
    }

    /// Resolves when a waiting notice has waited NOTICE_WAIT (never if none waits).
    async fn overdue(&self) {
        match self.since {
            Some(t) => tokio::time::sleep_until(t + NOTICE_WAIT).await,
            None => std::future::pending().await,
        }
    }
}

/// The run's secrets: `--secret` declarations (or picks of the config's
/// `[secrets]`), their values read now from sandbench's environment or
/// private files.
fn secrets(args: &RunArgs, config: &Config) -> anyhow::Result<crate::egress::secrets::Secrets> {
    use crate::egress::secrets;
    let decls = secrets::declarations(&config.secrets, &args.secrets, &args.secret_in).map_err(usage)?;
    secrets::resolve_all(&decls, &|var| std::env::var_os(var)).map_err(usage)
}

/// `run`'s exit status: 130 when Ctrl-C cancelled it (as shells report an
/// interrupted command), 1 when the run could not happen, 4 when it ran but
/// a judge stopped short (`incomplete`: no verdict a script may take for
/// `ok`), else 0.
pub(crate) fn exit_code(r: &RunReport, interrupted: bool) -> i32 {
    match r.outcome {
        Outcome::Cancelled if interrupted => 130,
        Outcome::Error => 1,
        Outcome::Incomplete => 4,
        _ => 0,
    }
}

/// `network` lines: the limit, the counts, then each connection (at most 10).
fn network_summary(r: &RunReport) -> String {
    use crate::egress::Decision;
    let allowed = r.network.iter().filter(|n| n.decision == Decision::Allowed).count();
    let denied = r.network.len() - allowed;
    let mut s = format!("network   {} · {allowed} allowed, {denied} denied\n", r.limits.network);
    for n in r.network.iter().take(10) {
        let line = match n.decision {
            Decision::Allowed => format!(
                "allowed {} {}:{} → {} · {} up, {} down, {}",
                n.method,
                n.host,
                n.port,
                n.address.as_deref().unwrap_or("?"),
                units::size(n.bytes_up),
                units::size(n.bytes_down),
                units::duration_ms(n.duration_ms)
            ),
            Decision::Denied => format!("denied  {} {}:{} — {}", n.method, n.host, n.port, n.detail),
        };
        s.push_str(&format!("          {}\n", sanitize::inert_line(&line, 400)));
    }
    if r.network.len() > 10 {
        s.push_str(&format!("          … {} more in the report's network list\n", r.network.len() - 10));
    }
    s
}

/// The closing lines of a text-mode run.
pub fn summary(r: &RunReport) -> String {
    // Every text that is not sandbench's own is one inert line: a newline
    // in it would forge a line of the summary.
    let line = |s: &str| sanitize::inert_line(s, 400);
    let t = &r.timings_ms;
    let u = &r.usage;
    let mut s = format!(
        "── sandbench · {} · {} ──\noutcome   {}\nexit      {}\n",
        line(&r.tier),
        line(&r.label),
        r.outcome.name(),
        r.exit.describe()
    );
    if let Some(start) = r.start() {
        match r.start_note() {
            Some(why) => s.push_str(&format!("start     {} ({why})\n", start.name())),
            None => s.push_str(&format!("start     {}\n", start.name())),
        }
    }
    if let Some(shell) = r.details["shell"].as_str() {
        s.push_str(&format!("shell     {}\n", crate::sanitize::inert_line(shell, 120)));
    }
    if let Some(e) = &r.error {
        s.push_str(&format!("error     {}\n", line(e)));
    }
    if !r.degraded.is_empty() {
        let lacked: Vec<String> = r.degraded.iter().map(|d| line(d)).collect();
        s.push_str(&format!("DEGRADED  the sandbox lacked: {}\n", lacked.join("; ")));
    }
    for v in &r.violations {
        s.push_str(&format!("violation {} at {}: {}\n", v.kind.name(), units::duration_ms(v.at_ms), line(&v.detail)));
    }
    for b in &r.incomplete {
        s.push_str(&format!("INCOMPLETE {}: {}\n", line(&b.bound), line(&b.detail)));
    }
    if !r.limits.network.is_none() || !r.network.is_empty() {
        s.push_str(&network_summary(r));
    }
    // Names and hosts only (checked when declared); never a value.
    for x in &r.secrets {
        let leak = if x.redacted > 0 {
            format!(" · {} form(s) of its value taken out of the run's output: it reached the sandbox", x.redacted)
        } else {
            String::new()
        };
        // What came back, by spelling: `scrubbed 3 (percent 2, raw 1)`.
        let by = if x.scrubbed_by.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = x.scrubbed_by.iter().map(|(k, n)| format!("{k} {n}")).collect();
            format!(" ({})", parts.join(", "))
        };
        s.push_str(&format!(
            "secret    {} → {} (in {}) · substituted {} · scrubbed {}{by} · misdirected {}{leak}\n",
            line(&x.name),
            line(&x.hosts.join(", ")),
            line(&x.places),
            x.substituted,
            x.scrubbed,
            x.misdirected
        ));
    }
    let d = units::duration_ms;
    s.push_str(&format!(
        "time      setup {} · run {} · teardown {} · total {}{}\n",
        d(t.setup),
        d(t.run),
        d(t.teardown),
        d(t.total),
        t.first_output.map(|f| format!(" · first output at {}", d(f))).unwrap_or_default()
    ));
    s.push_str(&format!(
        "usage     cpu {} · peak memory {} · peak pids {}",
        units::or_dash(u.cpu_ms, |c| d(c as f64)),
        units::or_dash(u.peak_memory_bytes, units::size),
        units::or_dash(u.peak_pids, |p| p.to_string()),
    ));
    if r.stdout_truncated || r.stderr_truncated {
        s.push_str("\noutput    truncated at the output limit");
    }
    s
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::Notices;

    /// What a terminal would show: the program's bytes and sandbench's
    /// lines in the order they were written.
    fn screen(steps: &[Result<&str, &str>], finish: bool) -> String {
        let shown = RefCell::new(String::new());
        let mut n = Notices::new(|l: &str| shown.borrow_mut().push_str(&format!("{l}\n")));
        for step in steps {
            match step {
                Ok(out) => n.output(out.as_bytes(), |b| shown.borrow_mut().push_str(std::str::from_utf8(b).unwrap())),
                Err(note) => n.push(note.to_string()),
            }
        }
        if finish {
            n.finish();
        }
        drop(n);
        shown.into_inner()
    }

    #[test]
    fn a_notice_never_splits_a_line_of_the_program() {
        // Each row: the program's chunks (Ok) and notices (Err) as they come; the screen.
        type Row<'a> = (&'a [Result<&'a str, &'a str>], bool, &'a str);
        let rows: &[Row] = &[
            // Mid-line: the notice waits for the line's end, even across chunks.
            (&[Ok("KEY = sbx-s"), Err("N"), Ok("ecret\nnext")], false, "KEY = sbx-secret\nN\nnext"),
            // Between lines: at once.
            (&[Ok("a\n"), Err("N"), Ok("b\n")], false, "a\nN\nb\n"),
            // Two notices wait together; a chunk with several lines lets them out after its last.
            (&[Ok("x"), Err("N1"), Err("N2"), Ok("y\nz\nw")], false, "xy\nz\nN1\nN2\nw"),
            // The program never ends its line: at the end its line is closed, then the notice.
            (&[Ok("progress 50%"), Err("N")], true, "progress 50%\nN\n"),
            // Nothing waits: the end still closes the program's line for the summary.
            (&[Ok("no newline")], true, "no newline\n"),
            (&[Ok("done\n")], true, "done\n"),
        ];
        for (steps, finish, want) in rows {
            assert_eq!(screen(steps, *finish), *want, "{steps:?}");
        }
    }
}
