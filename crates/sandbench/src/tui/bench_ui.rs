//! `sandbench bench-ui`: the workbench's frame work, key-to-screen latency
//! and peak memory while output floods in, through the real event loop on
//! a test backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::Event;
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::app::{App, Msg};
use super::engine::failed;
use super::event_loop::{new_loop, peak_rss, percentile, Input, FRAME};
use super::highlight::SyntaxAssets;
use super::run_view::PreSanitizer;
use super::theme::Theme;
use crate::config::Config;
use crate::event::{EventKind, RunEvent, Stream};
use crate::runner::Update;
use crate::tier;
/// What `bench-ui` floods the app with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloodSource {
    /// Synthetic output events generated in-process as fast as the UI takes them (UI cost alone).
    Synthetic,
    /// A real flood program on the process tier (end to end, includes the runner).
    Process,
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
            // The workbench's runs keep only a head of the output in their
            // reports (the engine's REPORT_KEEPS), so a high output limit
            // does not grow the process: the peak RSS holds whatever the limit.
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
