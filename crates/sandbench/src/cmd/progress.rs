//! Progress of a long headless command, on standard error. On a terminal a
//! bar redrawn in place (indicatif, which also decides what a terminal is);
//! anywhere else — a pipe, a file, a CI log — plain lines that never need a
//! `\r`, at most one per `every` and always the last. Nothing at all when
//! the command's output format asks for none.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    /// Plain lines instead of the bar (standard error is not a terminal).
    plain: bool,
    enabled: bool,
    every: Duration,
    last_line: Option<Instant>,
    pending: Option<String>,
}

impl Progress {
    /// A bar of `len` steps (`None`: a counter without an end), shown when
    /// `enabled`; in plain mode a line at most every `every`.
    pub fn new(len: Option<u64>, enabled: bool, every: Duration) -> Progress {
        let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
        let template =
            if len.is_some() { "{msg} [{bar:30}] {pos}/{len} · {elapsed}" } else { "{spinner} {msg} · {elapsed}" };
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let plain = bar.is_hidden();
        Progress { bar, plain, enabled, every, last_line: None, pending: None }
    }

    /// Step `pos`, described by `msg` (in plain mode the line says both).
    pub fn set(&mut self, pos: u64, msg: &str) {
        if !self.enabled {
            return;
        }
        if !self.plain {
            self.bar.set_position(pos);
            self.bar.set_message(msg.to_string());
            return;
        }
        let line = match self.bar.length() {
            Some(len) => format!("{msg} ({pos}/{len})"),
            None => msg.to_string(),
        };
        let due = self.last_line.is_none_or(|t| t.elapsed() >= self.every);
        if due {
            eprintln!("{line}");
            self.last_line = Some(Instant::now());
            self.pending = None;
        } else {
            self.pending = Some(line);
        }
    }

    /// The end: the bar goes; a plain line not yet printed is.
    pub fn finish(&mut self) {
        if !self.enabled {
            return;
        }
        if self.plain {
            if let Some(l) = self.pending.take() {
                eprintln!("{l}");
            }
        } else {
            self.bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}
