//! The terminal side: a fixed frame rate (the oha pattern). Each frame
//! drains the run-event channel within a time budget, lets the app do its
//! between-frame work, and draws once. Keys and signals are handled the
//! moment they arrive; an output flood only ever costs one drain budget per
//! frame, and backpressure (bounded channels) slows the sandbox, not the UI.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ratatui::backend::{Backend, TestBackend};
use ratatui::crossterm::event::{DisableBracketedPaste, EnableBracketedPaste, Event, EventStream};
use ratatui::crossterm::execute;
use ratatui::layout::Rect;
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::app::{App, Msg};
use super::engine::Engine;
use super::theme::Theme;
use super::widgets;
use crate::config::Config;
use crate::error::usage;
use crate::tier;

/// One frame every 16 ms at most (~60 fps).
pub const FRAME: Duration = Duration::from_millis(16);
/// Time a frame may spend folding run events before it draws.
const DRAIN_BUDGET: Duration = Duration::from_millis(6);
/// Time a frame may spend highlighting.
const HIGHLIGHT_BUDGET: Duration = Duration::from_millis(3);
/// After a quit, how long running runs get to stop and clean up.
const QUIT_GRACE: Duration = Duration::from_secs(30);
/// Run events waiting for the UI (backpressure beyond this). Output chunks
/// are up to 64 KiB (a few hundred KiB once split into styled lines), so
/// this bounds what waits for the UI to about 10 MiB.
const CHANNEL: usize = 32;

/// Frame work times, for the bench and the log.
#[derive(Default)]
pub struct FrameStats {
    pub frames: Vec<Duration>,
    pub draws: usize,
    pub msgs: u64,
    /// Bench keys: from being sent to the end of the first draw after it.
    pub key_to_screen: Vec<Duration>,
    pub(super) keys_waiting: Vec<Instant>,
}

/// The `p` quantile of durations (the one percentile, `stats::percentile`).
pub fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64()).collect();
    ms.sort_by(f64::total_cmp);
    let q = crate::stats::percentile(&ms, p);
    if q.is_nan() {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(q)
    }
}

impl FrameStats {
    pub fn percentile(&self, p: f64) -> Duration {
        percentile(&self.frames, p)
    }
}

/// Where keys come from: the terminal, a channel of timed keys (bench), or nowhere.
pub(super) enum Input {
    Terminal(EventStream),
    Timed(mpsc::UnboundedReceiver<(Instant, Event)>),
}

impl Input {
    async fn next(&mut self) -> Option<(Option<Instant>, std::io::Result<Event>)> {
        match self {
            Input::Terminal(s) => s.next().await.map(|e| (None, e)),
            Input::Timed(rx) => match rx.recv().await {
                Some((at, e)) => Some((Some(at), Ok(e))),
                None => std::future::pending().await,
            },
        }
    }
}

pub(super) struct Loop<'a, B: Backend> {
    terminal: &'a mut Terminal<B>,
    pub(super) app: &'a mut App,
    pub(super) engine: Engine,
    run_rx: mpsc::Receiver<Msg>,
    ctl_rx: mpsc::UnboundedReceiver<Msg>,
    input: Input,
    pub(super) stats: FrameStats,
}

impl<B: Backend> Loop<'_, B> {
    pub(super) fn effects(&mut self) {
        for e in self.app.take_effects() {
            self.engine.apply(e);
        }
    }

    pub(super) async fn run(&mut self, mut stop_when: impl FnMut(&mut App) -> bool) -> anyhow::Result<()> {
        let mut tick = tokio::time::interval(FRAME);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut quit_since: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                ev = self.input.next() => match ev {
                    Some((sent, Ok(Event::Key(k)))) => {
                        self.app.update(Msg::Key(k));
                        self.stats.keys_waiting.extend(sent);
                    }
                    Some((_, Ok(Event::Paste(s)))) => self.app.update(Msg::Paste(s)),
                    Some((_, Ok(Event::Resize(..)))) => self.app.dirty = true,
                    Some((_, Ok(_))) => {}
                    Some((_, Err(e))) => anyhow::bail!("reading the terminal failed: {e}"),
                    None => self.app.update(Msg::Terminate),
                },
                Some(m) = self.ctl_rx.recv() => self.app.update(m),
                _ = tick.tick() => {
                    let t0 = Instant::now();
                    while t0.elapsed() < DRAIN_BUDGET {
                        match self.run_rx.try_recv() {
                            Ok(m) => {
                                self.stats.msgs += 1;
                                self.app.update(m);
                            }
                            Err(_) => break,
                        }
                    }
                    let size = self.terminal.size().map_err(|e| anyhow::anyhow!("terminal size: {e}"))?;
                    self.app.prepare(Rect::new(0, 0, size.width, size.height), HIGHLIGHT_BUDGET);
                    // Live runs tick their clocks even without events.
                    if self.app.dirty || self.app.busy() {
                        let frame = self.terminal.draw(|f| widgets::draw(&self.app.scene(), f)).map_err(|e| anyhow::anyhow!("drawing failed: {e}"))?;
                        if self.app.screenshot_wanted {
                            let t = &self.app.theme.ui;
                            let svg = crate::tui::screenshot::svg(frame.buffer, t.fg, t.bg);
                            self.app.save_screen(&svg);
                        }
                        self.app.dirty = false;
                        self.stats.draws += 1;
                        for sent in self.stats.keys_waiting.drain(..) {
                            self.stats.key_to_screen.push(sent.elapsed());
                        }
                    }
                    self.stats.frames.push(t0.elapsed());
                    if self.app.should_exit() || stop_when(&mut *self.app) {
                        break;
                    }
                    if self.app.quitting {
                        let since = *quit_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > QUIT_GRACE {
                            tracing::warn!("runs did not stop within {QUIT_GRACE:?} after quit; leaving anyway");
                            break;
                        }
                    }
                }
            }
            self.effects();
        }
        Ok(())
    }
}

impl<B: Backend> Loop<'_, B> {
    /// Whatever ended the loop (quit, a terminal error), runs still going are
    /// cancelled and waited for, so that nothing of theirs is left behind.
    async fn shutdown(&mut self) {
        if !self.app.busy() {
            return;
        }
        self.app.quit(true);
        self.effects();
        let deadline = tokio::time::Instant::now() + QUIT_GRACE;
        while self.app.busy() {
            match tokio::time::timeout_at(deadline, self.run_rx.recv()).await {
                Ok(Some(m)) => self.app.update(m),
                Ok(None) | Err(_) => {
                    tracing::warn!("runs did not end within {QUIT_GRACE:?} of shutting down");
                    break;
                }
            }
        }
    }
}

pub(super) fn new_loop<'a, B: Backend>(
    terminal: &'a mut Terminal<B>,
    app: &'a mut App,
    config: &Config,
    input: Input,
) -> Loop<'a, B> {
    let (run_tx, run_rx) = mpsc::channel(CHANNEL);
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let engine = Engine::new(config, run_tx, ctl_tx);
    Loop { terminal, app, engine, run_rx, ctl_rx, input, stats: FrameStats::default() }
}

/// Drive `app` through the real event loop and engine (real tiers, real
/// gauntlets) on a `TestBackend` of `width` × `height`, without keys:
/// `step` is called once a frame and may press keys (`app.update`); the loop
/// ends when it returns true. Whatever is still going is then cancelled and
/// waited for, as when the workbench quits. For tests of whole flows.
pub async fn run_headless(
    config: &Config,
    app: &mut App,
    width: u16,
    height: u16,
    step: impl FnMut(&mut App) -> bool,
) -> anyhow::Result<()> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (_keys, rx) = mpsc::unbounded_channel();
    let mut lp = new_loop(&mut terminal, app, config, Input::Timed(rx));
    lp.effects();
    let r = lp.run(step).await;
    lp.shutdown().await;
    r
}

/// `sandbench [FILE] [--theme T]`: the workbench.
pub async fn run(config: &Config, file: Option<PathBuf>, theme: Option<String>) -> anyhow::Result<i32> {
    let theme = Theme::load(theme.as_deref().unwrap_or(&config.theme)).map_err(|e| usage(format!("{e:#}")))?;
    // sandbench's tiers, then the peers (other tools' sandboxes) as further columns.
    let names: Vec<String> = tier::known_names();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut app = App::new(theme, &refs, &config.default_tier, config.limits.clone());
    app.api_key_set = config.env.anthropic_api_key.is_some();
    app.offered_secrets = config.secrets.clone();
    app.samples_dirs = super::app::default_samples_dirs(config.host.samples_dir.as_deref());
    if let Some(f) = &file {
        app.open(f).map_err(|e| usage(format!("{e:#}")))?;
    }
    if let Some(d) = &config.samples_dir {
        // $SANDBENCH_SAMPLES (first when set) still wins over the config.
        let at = usize::from(config.host.samples_dir.is_some());
        app.samples_dirs.insert(at, d.clone());
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(usage("the workbench needs a terminal; for headless runs use `sandbench run FILE`"));
    }
    let mut terminal = ratatui::try_init().map_err(|e| anyhow::anyhow!("cannot set up the terminal: {e}"))?;
    let _ = execute!(std::io::stdout(), EnableBracketedPaste);
    let result = {
        let mut lp = new_loop(&mut terminal, &mut app, config, Input::Terminal(EventStream::new()));
        lp.engine.probe_all(&names);
        lp.engine.load_assets();
        lp.engine.follow_log();
        spawn_signals(lp.engine.ctl_tx.clone());
        let r = lp.run(|_| false).await;
        lp.shutdown().await;
        let s = &lp.stats;
        tracing::info!(
            frames = s.frames.len(),
            draws = s.draws,
            p50_us = s.percentile(0.5).as_micros() as u64,
            p99_us = s.percentile(0.99).as_micros() as u64,
            max_us = s.percentile(1.0).as_micros() as u64,
            peak_rss_mib = peak_rss().unwrap_or(0) >> 20,
            "tui frame times"
        );
        r
    };
    let _ = execute!(std::io::stdout(), DisableBracketedPaste);
    ratatui::restore();
    result.map(|_| 0)
}

/// SIGTERM, SIGHUP and SIGINT (from outside: in raw mode ^C is a key) quit
/// cleanly: runs are cancelled and cleaned up, the terminal restored.
fn spawn_signals(tx: mpsc::UnboundedSender<Msg>) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::hangup(), SignalKind::interrupt()] {
        let tx = tx.clone();
        match signal(kind) {
            Ok(mut s) => {
                tokio::spawn(async move {
                    while s.recv().await.is_some() {
                        if tx.send(Msg::Terminate).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {kind:?}: {e}"),
        }
    }
}

/// Peak resident set size of this process (VmHWM), in bytes.
pub fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
