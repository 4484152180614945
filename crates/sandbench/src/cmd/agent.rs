//! `sandbench agent`: a model with one tool, `run_code`, executed on a tier.
//! Text mode streams the transcript; `--format json` prints it at the end.

use std::io::Write;

use crate::agent::{self, AgentOptions, EndReason, TranscriptEvent};
use crate::cli::{AgentArgs, Format};
use crate::config::Config;
use crate::event::Stream;
use crate::sanitize::visible_controls;
use crate::tier;

use super::usage;

pub async fn run(args: AgentArgs, config: &Config) -> anyhow::Result<i32> {
    if args.list_models {
        return list_models(&args, config).await;
    }
    let task = args.task.clone().unwrap_or_default();
    let tier_name = args.tier.clone().unwrap_or_else(|| config.default_tier.clone());
    let tier = tier::by_name(&tier_name, config).map_err(|e| usage(e.to_string()))?;
    if task.trim().is_empty() {
        return Err(usage("the task is empty: say what the model should do"));
    }
    let limits = args.limits.apply(config.limits.clone());
    let mut secrets = crate::egress::secrets::Secrets::default();
    if !args.secrets.is_empty() {
        use crate::egress::secrets as s;
        let decls = s::declarations(&config.secrets, &args.secrets, &args.secret_in).map_err(usage)?;
        secrets = s::resolve_all(&decls, &|var| std::env::var_os(var)).map_err(usage)?;
        tier::check_secrets(&tier_name, &secrets).map_err(usage)?;
        secrets.check(&limits.network, &Default::default()).map_err(usage)?;
    }
    let mut opts = AgentOptions::from_config(tier.clone(), limits, config)?;
    opts.secrets = secrets;
    // Before the model is asked anything: a tier that cannot run programs
    // would only feed it errors.
    let avail = tier.probe().await;
    if !avail.available {
        anyhow::bail!("the {} tier is not available here: {} (see sandbench doctor)", tier.name(), avail.summary);
    }
    // A loop runs many programs on one tier: warm it while the model thinks.
    let warm = tier.clone();
    tokio::spawn(async move { warm.prewarm().await });
    if let Some(m) = &args.model {
        opts.model = m.clone();
    }
    if let Some(n) = args.max_turns {
        opts.max_turns = n;
    }
    let mut handle = agent::start(opts, task);
    let canceller = handle.canceller();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            canceller.cancel();
        }
    });
    let text = args.format == Format::Text;
    let mut out = std::io::stdout();
    let mut view = View::default();
    while let Some(ev) = handle.events.recv().await {
        if text {
            render(&mut out, &ev, &mut view);
            let _ = out.flush();
        }
    }
    let t = handle.finish().await;
    if !text {
        super::emit_json(&t)?;
    }
    if let (EndReason::Error, Some(e)) = (t.reason, &t.error) {
        eprintln!("sandbench: agent stopped: {}", visible_controls(e.as_bytes()));
    }
    Ok(match t.reason {
        EndReason::FinalAnswer => 0,
        EndReason::TurnLimit => 3,
        EndReason::Error => 1,
        EndReason::Cancelled => 130,
    })
}

/// `--list-models`: what the key can use, the configured model marked, so
/// that a user can pick one for `--model` / `[agent] model`.
async fn list_models(args: &AgentArgs, config: &Config) -> anyhow::Result<i32> {
    let models = agent::list_models(config, false).await?;
    let configured = args.model.clone().unwrap_or_else(|| config.agent.model.clone());
    let offered = models.iter().any(|m| m.id == configured);
    if args.format == Format::Json {
        let v = serde_json::json!({"configured": configured, "configured_offered": offered, "models": models});
        super::emit_json(&v)?;
        return Ok(0);
    }
    // Everything here is the server's text: bounded, controls made visible.
    let clean = |s: &str| visible_controls(crate::http::message_line(s, 80).as_bytes());
    let width = models.iter().map(|m| clean(&m.id).chars().count()).max().unwrap_or(0);
    println!("models this key can use, newest first (* = the configured model):");
    for m in &models {
        let mark = if m.id == configured { '*' } else { ' ' };
        let mut state = m.lifecycle.as_deref().map(clean).unwrap_or_default();
        if let Some(r) = m.retires_at.as_deref() {
            state = format!("{state}, retires {}", clean(r));
        }
        println!("{mark} {:<width$}  {}  {state}", clean(&m.id), clean(&m.display_name));
    }
    if !offered {
        println!(
            "the configured model '{}' is not offered to this key: pass --model NAME or set `model = \"NAME\"` under [agent] in the config",
            clean(&configured)
        );
    }
    Ok(0)
}

/// What the text view remembers between events.
#[derive(Debug, Default)]
pub struct View {
    /// The cursor is not at the start of a line.
    mid_line: bool,
    /// The turn whose text has been streamed already.
    streamed_turn: Option<u32>,
}

/// One transcript event as terminal text. Everything from the model or a
/// sandbox goes through `visible_controls`: neither may drive the terminal.
pub fn render(out: &mut impl Write, ev: &TranscriptEvent, view: &mut View) {
    let clean = |s: &str| visible_controls(s.as_bytes());
    let mid_line = &mut view.mid_line;
    let mut line = |out: &mut dyn Write, s: String| {
        if *mid_line {
            let _ = writeln!(out);
            *mid_line = false;
        }
        let _ = writeln!(out, "{s}");
    };
    match ev {
        TranscriptEvent::Started { task, model, tier, max_turns } => {
            line(out, format!("── sandbench agent · {} · tier {tier} · up to {max_turns} turns ──", clean(model)));
            line(out, format!("task: {}", clean(task)));
        }
        TranscriptEvent::Sandbox { note, .. } => line(out, format!("sandbox: {}", clean(note))),
        TranscriptEvent::TextDelta { turn, text } => {
            if view.streamed_turn != Some(*turn) {
                line(out, format!("\n[turn {turn}] model:"));
                view.streamed_turn = Some(*turn);
            }
            let t = clean(text);
            let _ = write!(out, "{t}");
            if !t.is_empty() {
                *mid_line = !t.ends_with('\n');
            }
        }
        TranscriptEvent::Text { turn, text } => {
            if view.streamed_turn == Some(*turn) {
                // Already on screen, delta by delta.
                if *mid_line {
                    let _ = writeln!(out);
                    *mid_line = false;
                }
            } else {
                line(out, format!("\n[turn {turn}] model:"));
                line(out, clean(text));
            }
        }
        TranscriptEvent::Turn { .. } => {}
        TranscriptEvent::ToolCall { turn, id, language, code } => {
            line(out, format!("\n[turn {turn}] run_code · {language} · {}", clean(id)));
            for l in clean(code).lines() {
                line(out, format!("  │ {l}"));
            }
            line(out, "  ── output ──".into());
        }
        TranscriptEvent::ToolOutput { stream, text, .. } => {
            // stderr lines are marked "! " (at line starts only: a line may
            // come in several chunks).
            for piece in clean(text).split_inclusive('\n') {
                if *stream == Stream::Stderr && !view.mid_line {
                    let _ = write!(out, "! ");
                }
                let _ = write!(out, "{piece}");
                view.mid_line = !piece.ends_with('\n');
            }
        }
        TranscriptEvent::ToolResult { summary, .. } => {
            line(out, format!("  ── verdict: {}", clean(summary)));
        }
        TranscriptEvent::ToolRejected { id, reason } => {
            line(out, format!("  ── tool call {} refused: {}", clean(id), clean(reason)));
        }
        TranscriptEvent::Retrying { attempt, wait_ms, reason, .. } => {
            line(out, format!("  (retry {attempt} in {:.1} s: {})", *wait_ms as f64 / 1000.0, clean(reason)));
        }
        TranscriptEvent::Finished { reason, turns, error, .. } => match reason {
            EndReason::FinalAnswer => line(out, format!("\n── final answer after {turns} turn(s) ──")),
            EndReason::TurnLimit => {
                line(out, format!("\n── stopped: turn limit reached ({turns}) without a final answer ──"))
            }
            EndReason::Cancelled => line(out, format!("\n── cancelled after {turns} turn(s) ──")),
            EndReason::Error => line(
                out,
                format!("\n── error after {turns} turn(s): {} ──", clean(error.as_deref().unwrap_or("unknown error"))),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_is_marked_once_per_line_across_chunks() {
        let mut out = Vec::new();
        let mut mid = View::default();
        for (stream, text) in
            [(Stream::Stdout, "a\n"), (Stream::Stderr, "oops"), (Stream::Stderr, "\n"), (Stream::Stderr, "x\ny\n")]
        {
            let ev = TranscriptEvent::ToolOutput { id: "t".into(), stream, text: text.into() };
            render(&mut out, &ev, &mut mid);
        }
        assert_eq!(String::from_utf8(out).unwrap(), "a\n! oops\n! x\n! y\n");
    }

    #[test]
    fn streamed_text_is_shown_once() {
        let mut out = Vec::new();
        let mut v = View::default();
        for ev in [
            TranscriptEvent::TextDelta { turn: 1, text: "Hel".into() },
            TranscriptEvent::TextDelta { turn: 1, text: "lo\u{1b}[2J".into() },
            TranscriptEvent::Text { turn: 1, text: "Hello\u{1b}[2J".into() },
            TranscriptEvent::Text { turn: 2, text: "unstreamed".into() },
        ] {
            render(&mut out, &ev, &mut v);
        }
        assert_eq!(String::from_utf8(out).unwrap(), "\n[turn 1] model:\nHello␛[2J\n\n[turn 2] model:\nunstreamed\n");
    }
}
