//! The terminal side: a fixed frame rate (the oha pattern). Each frame
//! drains the run-event channel within a time budget, lets the app do its
//! between-frame work, and draws once. Keys and signals are handled the
//! moment they arrive; an output flood only ever costs one drain budget per
//! frame, and backpressure (bounded channels) slows the sandbox, not the UI.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use ratatui::backend::{Backend, TestBackend};
use ratatui::crossterm::event::{DisableBracketedPaste, EnableBracketedPaste, Event, EventStream};
use ratatui::crossterm::execute;
use ratatui::layout::Rect;
use ratatui::Terminal;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::app::{App, Effect, Msg};
use super::highlight::SyntaxAssets;
use super::run_view::PreSanitizer;
use super::theme::Theme;
use super::widgets;
use crate::cmd::usage;
use crate::config::Config;
use crate::event::{EventKind, RunEvent, Stream};
use crate::runner::Update;
use crate::{runner, tier};

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
/// How often the runs view looks for runs other processes logged.
const LOG_POLL: Duration = Duration::from_millis(500);

/// Runs and probes: the only part that touches tiers.
struct Engine {
    config: Config,
    /// One instance per tier for the workbench's life: its spares and warm
    /// pools serve every run (see `tier::Tiers`).
    tiers: Arc<tier::Tiers>,
    run_tx: mpsc::Sender<Msg>,
    ctl_tx: mpsc::UnboundedSender<Msg>,
    cancels: HashMap<u64, CancellationToken>,
}

impl Engine {
    fn probe_all(&self, names: &[String]) {
        for name in names {
            let (name, tiers, tx) = (name.clone(), self.tiers.clone(), self.ctl_tx.clone());
            let all = self.config.prewarm == crate::config::Prewarm::All;
            tokio::spawn(async move {
                let t = match tiers.get(&name) {
                    Ok(t) => t,
                    Err(e) => {
                        let avail = tier::Availability {
                            tier: name.clone(),
                            available: false,
                            summary: format!("{e:#}"),
                            checks: vec![],
                        };
                        let _ = tx.send(Msg::Probed(avail));
                        return;
                    }
                };
                let avail = t.probe().await;
                let ready = avail.available;
                let _ = tx.send(Msg::Probed(avail));
                // With `prewarm = "all"` every ready tier warms now; else the
                // app asks for the tiers the user selects (Effect::Prewarm).
                if ready && all {
                    t.prewarm().await;
                }
            });
        }
    }

    /// Every 2 s, what each tier holds warm (spares, pools) and its memory,
    /// for the tier pane.
    fn watch_held(&self) {
        let (tiers, tx) = (self.tiers.clone(), self.ctl_tx.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let t = tiers.clone();
                let Ok(list) = tokio::task::spawn_blocking(move || t.held()).await else { return };
                if tx.send(Msg::Held(list)).is_err() {
                    return;
                }
            }
        });
    }

    /// Follow the run log: what any sandbench process appends shows up in
    /// the runs view. A file is polled (no inotify: the log may sit on any
    /// file system), cheaply — a read from the last offset.
    fn follow_log(&self) {
        let Some(log) = crate::runlog::installed().cloned() else { return };
        let tx = self.ctl_tx.clone();
        tokio::spawn(async move {
            let mut offset = 0;
            loop {
                let l = log.clone();
                let read = tokio::task::spawn_blocking(move || l.read_from(offset)).await;
                if let Ok(Ok((entries, next))) = read {
                    offset = next;
                    if !entries.is_empty() && tx.send(Msg::LogEntries(entries)).is_err() {
                        return;
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(LOG_POLL).await;
            }
        });
    }

    fn load_assets(&self) {
        let tx = self.ctl_tx.clone();
        tokio::task::spawn_blocking(move || {
            let _ = tx.send(Msg::Assets(Arc::new(SyntaxAssets::load())));
        });
        // The last gauntlet, for the frontier chart before a new one runs.
        let tx = self.ctl_tx.clone();
        tokio::task::spawn_blocking(move || match crate::state::load_gauntlet_in(&crate::config::state_dir()) {
            Ok(Some(saved)) => {
                let _ = tx.send(Msg::SavedGauntlet(Box::new(saved.data)));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("the last gauntlet is not shown: {e:#}"),
        });
    }

    fn apply(&mut self, e: Effect) {
        match e {
            Effect::Start { id, tier: name, spec } => {
                tracing::info!(id, tier = %name, label = %spec.label, "tui run start");
                let tier = match self.tiers.get(&name) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = self.ctl_tx.send(Msg::Finished(id, failed(&name, &spec, format!("{e:#}"))));
                        return;
                    }
                };
                let logged = spec.clone();
                let mut handle = runner::start(tier, spec);
                self.cancels.insert(id, handle.canceller());
                let tx = self.run_tx.clone();
                tokio::spawn(async move {
                    let mut pre = PreSanitizer::default();
                    while let Some(ev) = handle.events.recv().await {
                        if let runner::Update::Finished(r) = &ev {
                            crate::runlog::record(&logged, r, None);
                        }
                        if tx.send(pre.convert(id, ev)).await.is_err() {
                            // The UI is gone: still drain so the run ends and cleans up.
                            handle.cancel();
                        }
                    }
                });
            }
            Effect::Prewarm(name) => {
                if self.config.prewarm == crate::config::Prewarm::None {
                    return;
                }
                if let Ok(t) = self.tiers.get(&name) {
                    tracing::info!(tier = %name, "tui prewarm");
                    tokio::spawn(async move { t.prewarm().await });
                }
            }
            Effect::Cancel(id) => {
                if let Some(c) = self.cancels.get(&id) {
                    c.cancel();
                }
            }
            Effect::Gauntlet { id, tiers: names, mut skipped, samples, limits } => {
                tracing::info!(id, tiers = ?names, samples = samples.len(), "tui gauntlet start");
                let mut tiers = vec![];
                for name in names {
                    match self.tiers.get(&name) {
                        Ok(t) => tiers.push(t),
                        Err(e) => skipped.push((name, format!("{e:#}"))),
                    }
                }
                let stop = CancellationToken::new();
                self.cancels.insert(id, stop.clone());
                // The secret canary's value, to keep it off the screen.
                let secret = std::env::var(crate::gauntlet::canary::SECRET_VAR).ok().filter(|s| !s.is_empty());
                let (gtx, mut grx) = mpsc::channel(16);
                let task = tokio::spawn(crate::gauntlet::run_until(
                    tiers,
                    skipped,
                    samples,
                    limits,
                    1,
                    Some(gtx),
                    stop.clone(),
                ));
                let tx = self.run_tx.clone();
                let state_dir = crate::config::state_dir();
                tokio::spawn(async move {
                    let mut finished = false;
                    while let Some(mut ev) = grx.recv().await {
                        // The view has every cell from CellDone already: the
                        // matrix's copies (full reports) are not sent again.
                        if let crate::gauntlet::GauntletEvent::Finished(m) = &mut ev {
                            // Kept for `sandbench report --reuse` and the frontier.
                            let (m2, dir, s2) = (m.clone(), state_dir.clone(), secret.clone());
                            tokio::task::spawn_blocking(move || {
                                if let Err(e) = crate::state::save_gauntlet_in(&dir, &m2, s2.as_deref()) {
                                    tracing::warn!("could not keep the gauntlet: {e:#}");
                                }
                            });
                            m.cells.clear();
                        }
                        if let Some(s) = &secret {
                            super::gauntlet_view::redact_secret(&mut ev, s);
                        }
                        finished |= matches!(ev, crate::gauntlet::GauntletEvent::Finished(_));
                        let msg = match ev {
                            // Cut the output to bounded, sanitized heads here, not on the UI thread.
                            crate::gauntlet::GauntletEvent::CellDone(c) => {
                                Msg::GauntletCell(id, Box::new(super::gauntlet_view::CellView::new(*c)))
                            }
                            ev => Msg::Gauntlet(id, ev),
                        };
                        if tx.send(msg).await.is_err() {
                            // The UI is gone: stop after the cell in progress is cleaned up.
                            stop.cancel();
                        }
                    }
                    let why = match task.await {
                        Err(e) => Some(format!("the gauntlet task failed: {e}")),
                        Ok(_) if !finished => Some("the gauntlet ended without its matrix".to_string()),
                        Ok(_) => None,
                    };
                    if let Some(why) = why {
                        tracing::error!(id, "{why}");
                        let _ = tx.send(Msg::GauntletFailed(id, why)).await;
                    }
                });
            }
            Effect::Agent { id, tier: name, limits, task } => {
                tracing::info!(id, tier = %name, "tui agent start");
                let refuse = move |why: String| {
                    Msg::Agent(
                        id,
                        crate::agent::TranscriptEvent::Finished {
                            reason: crate::agent::EndReason::Error,
                            turns: 0,
                            answer: None,
                            error: Some(why),
                        },
                    )
                };
                let opts = self
                    .tiers
                    .get(&name)
                    .and_then(|t| crate::agent::AgentOptions::from_config(t, limits, &self.config));
                let opts = match opts {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = self.ctl_tx.send(refuse(format!("{e:#}")));
                        return;
                    }
                };
                let mut handle = crate::agent::start(opts, task);
                self.cancels.insert(id, handle.canceller());
                let tx = self.run_tx.clone();
                tokio::spawn(async move {
                    let mut finished = false;
                    while let Some(ev) = handle.events.recv().await {
                        finished |= matches!(ev, crate::agent::TranscriptEvent::Finished { .. });
                        if tx.send(Msg::Agent(id, ev)).await.is_err() {
                            handle.cancel();
                        }
                    }
                    let t = handle.finish().await;
                    if !finished {
                        let why = t.error.unwrap_or_else(|| "the agent loop ended without finishing".into());
                        let _ = tx.send(refuse(why)).await;
                    }
                });
            }
        }
    }
}

/// The report of a run that could not even start.
fn failed(tier: &str, spec: &crate::spec::RunSpec, error: String) -> Box<crate::report::RunReport> {
    Box::new(crate::report::RunReport {
        limits: spec.limits.clone(),
        ..crate::report::RunReport::failed(tier, spec.language.name(), &spec.label, error)
    })
}

/// Frame work times, for the bench and the log.
#[derive(Default)]
pub struct FrameStats {
    pub frames: Vec<Duration>,
    pub draws: usize,
    pub msgs: u64,
    /// Bench keys: from being sent to the end of the first draw after it.
    pub key_to_screen: Vec<Duration>,
    keys_waiting: Vec<Instant>,
}

pub fn percentile(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

impl FrameStats {
    pub fn percentile(&self, p: f64) -> Duration {
        percentile(&self.frames, p)
    }
}

/// Where keys come from: the terminal, a channel of timed keys (bench), or nowhere.
enum Input {
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

struct Loop<'a, B: Backend> {
    terminal: &'a mut Terminal<B>,
    app: &'a mut App,
    engine: Engine,
    run_rx: mpsc::Receiver<Msg>,
    ctl_rx: mpsc::UnboundedReceiver<Msg>,
    input: Input,
    stats: FrameStats,
}

impl<B: Backend> Loop<'_, B> {
    fn effects(&mut self) {
        for e in self.app.take_effects() {
            self.engine.apply(e);
        }
    }

    async fn run(&mut self, mut stop_when: impl FnMut(&mut App) -> bool) -> anyhow::Result<()> {
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
                        self.terminal.draw(|f| widgets::draw(self.app, f)).map_err(|e| anyhow::anyhow!("drawing failed: {e}"))?;
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

fn new_loop<'a, B: Backend>(
    terminal: &'a mut Terminal<B>,
    app: &'a mut App,
    config: &Config,
    input: Input,
) -> Loop<'a, B> {
    let (run_tx, run_rx) = mpsc::channel(CHANNEL);
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let engine = Engine {
        config: config.clone(),
        tiers: Arc::new(tier::Tiers::new(config)),
        run_tx,
        ctl_tx,
        cancels: HashMap::new(),
    };
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
    if let Some(f) = &file {
        app.open(f).map_err(|e| usage(format!("{e:#}")))?;
    }
    if let Some(d) = &config.samples_dir {
        // $SANDBENCH_SAMPLES (first when set) still wins over the config.
        let at = usize::from(std::env::var_os("SANDBENCH_SAMPLES").is_some());
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
        lp.engine.watch_held();
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

/// What `bench-ui` floods the app with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FloodSource {
    /// Synthetic output events generated in-process as fast as the UI takes them (UI cost alone).
    Synthetic,
    /// A real flood program on the process tier (end to end, includes the runner).
    Process,
}

/// Peak resident set size of this process (VmHWM), in bytes.
pub fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The flood program for the process source: 64 KiB writes of mixed lines,
/// colours, a hostile escape and a line without end, for `secs` seconds.
pub const FLOOD_PY: &str = r#"import sys, time
w = sys.stdout.buffer.write
line = b"".join(b"\x1b[3%dmline %06d \x1b[0m" % (i % 8, i) + b"x" * 60 + b"\t\x1b]52;c;AAAA\x07\n" for i in range(512))
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 5)
n = 0
while time.time() < end:
    w(line)
    n += 1
    if n % 64 == 0:
        w(b"y" * (1 << 20))
"#;

/// `sandbench bench-ui`: frame times and peak RSS while output floods in.
pub async fn bench_ui(
    config: &Config,
    source: FloodSource,
    secs: u64,
    output_limit: u64,
    width: u16,
    height: u16,
) -> anyhow::Result<i32> {
    let mut app = App::new(Theme::dark(), tier::KNOWN, "process", config.limits.clone());
    app.update(Msg::Assets(Arc::new(SyntaxAssets::load())));
    app.editor.set_text(&FLOOD_PY.replace("sys.argv[1] if len(sys.argv) > 1 else 5", &secs.to_string()));
    app.limits.wall_time = Duration::from_secs(secs + 5);
    app.limits.cpu_time = Duration::from_secs(secs + 5);
    // The runner keeps what it captures for the report; bound it so the
    // measurement is about the UI.
    app.limits.output_bytes = 8 << 40;
    let mut terminal = Terminal::new(TestBackend::new(width, height)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let rss_before = peak_rss().unwrap_or(0);
    let started = Instant::now();
    // A key every 50 ms (cursor down / up in the editor), timed from being
    // sent to the end of the frame that shows it.
    let (key_tx, key_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let mut i = 0u64;
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let code = if i.is_multiple_of(2) { KeyCode::Down } else { KeyCode::Up };
            i += 1;
            if key_tx.send((Instant::now(), Event::Key(KeyEvent::new(code, KeyModifiers::NONE)))).is_err() {
                break;
            }
        }
    });
    let mut lp = new_loop(&mut terminal, &mut app, config, Input::Timed(key_rx));
    let bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    match source {
        FloodSource::Process => {
            let t = tier::by_name("process", config)?;
            let a = t.probe().await;
            if !a.available {
                anyhow::bail!("the process tier is unavailable here: {}", a.summary);
            }
            lp.app.update(Msg::Probed(a));
            // The runner keeps a run's output for its report up to the
            // output limit (and queues events for a slow reader): that
            // memory is the runner's, reported apart from the UI's.
            lp.app.limits.output_bytes = output_limit;
            lp.app.run();
            lp.effects();
        }
        FloodSource::Synthetic => {
            lp.app.update(Msg::Probed(tier::Availability {
                tier: "process".into(),
                available: true,
                summary: "synthetic".into(),
                checks: vec![],
            }));
            lp.app.run();
            let _ = lp.app.take_effects();
            let id = lp.app.current.unwrap_or(1);
            let tx = lp.engine.run_tx.clone();
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut chunk = Vec::with_capacity(1 << 16);
                let mut i = 0u64;
                while chunk.len() < (1 << 16) - 200 {
                    chunk.extend_from_slice(
                        format!("\x1b[3{}mline {i:06}\x1b[0m {}\t\x1b]52;c;AAAA\x07\n", i % 8, "x".repeat(60))
                            .as_bytes(),
                    );
                    i += 1;
                }
                let long = vec![b'y'; 1 << 16];
                let t0 = Instant::now();
                let mut k = 0u64;
                // The same path as real runs: sanitized in this task, not on the UI thread.
                let mut pre = PreSanitizer::default();
                let mut ev = |kind| {
                    pre.convert(id, Update::Event(RunEvent { at_ms: t0.elapsed().as_secs_f64() * 1000.0, kind }))
                };
                let _ = tx.send(ev(EventKind::Phase(crate::event::Phase::Running))).await;
                while t0.elapsed() < Duration::from_secs(secs) {
                    // Every 16th chunk is part of one endless line (20 MB+ over a run).
                    let data = if k % 16 == 15 { long.clone() } else { chunk.clone() };
                    bytes.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    if tx.send(ev(EventKind::Output(Stream::Stdout, data))).await.is_err() {
                        return;
                    }
                    k += 1;
                }
                let mut report =
                    failed("process", &crate::spec::RunSpec::new(crate::spec::Language::Python, ""), String::new());
                report.outcome = crate::report::Outcome::Ok;
                report.error = None;
                let _ = tx.send(pre.convert(id, Update::Finished(report))).await;
            });
        }
    }
    lp.run(|app: &mut App| app.active_runs().is_empty()).await?;
    let elapsed = started.elapsed();
    let run_bytes = lp.app.current_run().map(|r| r.bytes).unwrap_or(0);
    let total =
        if source == FloodSource::Synthetic { bytes.load(std::sync::atomic::Ordering::Relaxed) } else { run_bytes };
    let s = &lp.stats;
    let mb = total as f64 / (1 << 20) as f64;
    println!("bench-ui · source {:?} · {}x{} · {:.1} s", source, width, height, elapsed.as_secs_f64());
    println!(
        "output      {mb:.0} MiB folded by the UI ({:.0} MiB/s), {} run messages",
        mb / elapsed.as_secs_f64(),
        s.msgs
    );
    println!(
        "frame work  p50 {:.2} ms · p99 {:.2} ms · max {:.2} ms over {} frames ({} drawn) · target p99 < 16 ms",
        s.percentile(0.5).as_secs_f64() * 1e3,
        s.percentile(0.99).as_secs_f64() * 1e3,
        s.percentile(1.0).as_secs_f64() * 1e3,
        s.frames.len(),
        s.draws
    );
    println!(
        "keys        key to screen p50 {:.2} ms · p99 {:.2} ms · max {:.2} ms over {} keys (frame interval {} ms)",
        percentile(&s.key_to_screen, 0.5).as_secs_f64() * 1e3,
        percentile(&s.key_to_screen, 0.99).as_secs_f64() * 1e3,
        percentile(&s.key_to_screen, 1.0).as_secs_f64() * 1e3,
        s.key_to_screen.len(),
        FRAME.as_millis()
    );
    let peak = peak_rss().unwrap_or(0);
    println!(
        "peak RSS    {:.1} MiB (before the flood {:.1} MiB) · target < 100 MiB",
        peak as f64 / (1 << 20) as f64,
        rss_before as f64 / (1 << 20) as f64
    );
    if let Some(r) = lp.app.current_run() {
        println!("kept        {} lines in the ring ({} dropped)", r.lines.len(), r.lines.dropped);
        if let Some(rep) = &r.report {
            println!("run         {}", rep.summary_line());
        }
    }
    Ok(0)
}
