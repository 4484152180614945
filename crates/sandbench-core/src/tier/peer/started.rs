//! Did the tool start the program? A peer's wrapper can fail before the
//! program ever runs (srt's proxy bridge, bwrap refusing a mount) and exit
//! with a code of its own: reported as the program's exit, that was an "ok"
//! of a program that never ran. So sandbench starts the program through a
//! launcher, inside the tool's sandbox, that writes a fresh marker line to
//! stdout and then execs the interpreter. The marker is a fact of the start
//! the program cannot take back: it is written before any of the program's
//! code runs, and only its first appearance at the start of stdout counts
//! (a program printing it again prints text).
//!
//! Until the marker is seen, what the tool writes to stderr is held back:
//! it is the tool's complaint when the program never starts (the run is an
//! error saying so), and the program's first output when it does.

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use crate::event::{EventKind, RunContext, Stream};

/// Bytes of stdout searched for the marker; bytes of stderr held until it.
const BEFORE_START: usize = 64 * 1024;

/// The launcher's argv (before the interpreter) and the line it prints.
pub(super) fn launcher(sh: &str) -> std::io::Result<(Vec<String>, String)> {
    let marker = format!("sandbench-started-{}", crate::host::random_hex(16)?);
    let argv = vec![sh.to_string(), "-c".into(), r#"printf '%s\n' "$0" && exec "$@""#.into(), marker.clone()];
    Ok((argv, marker))
}

/// Read the tool's stdout: drop the marker line (the bytes before it are the
/// tool's own and are passed on), say `started`, pass the rest on.
pub(super) async fn pump_stdout<R: AsyncRead + Unpin>(
    src: Option<R>,
    marker: String,
    ctx: RunContext,
    started: watch::Sender<bool>,
) {
    let Some(mut src) = src else { return };
    let line = format!("{marker}\n").into_bytes();
    let mut head: Vec<u8> = vec![];
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = false;
    loop {
        let n = match src.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if seen || head.len() >= BEFORE_START {
            ctx.emit(EventKind::Output(Stream::Stdout, buf[..n].to_vec())).await;
            continue;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(at) = head.windows(line.len()).position(|w| w == line.as_slice()) {
            seen = true;
            let rest = head.split_off(at + line.len());
            head.truncate(at);
            if !head.is_empty() {
                ctx.emit(EventKind::Output(Stream::Stdout, std::mem::take(&mut head))).await;
            }
            let _ = started.send(true);
            if !rest.is_empty() {
                ctx.emit(EventKind::Output(Stream::Stdout, rest)).await;
            }
        } else if head.len() >= BEFORE_START {
            // No marker where it must be: the tool's own output. The run is
            // judged as not started.
            ctx.emit(EventKind::Output(Stream::Stdout, std::mem::take(&mut head))).await;
        }
    }
    if !seen && !head.is_empty() {
        ctx.emit(EventKind::Output(Stream::Stdout, head)).await;
    }
}

/// Read the tool's stderr: held back until the program started, then passed
/// on in order. Returns what was held if it never started (the tool's
/// complaint).
pub(super) async fn pump_stderr<R: AsyncRead + Unpin>(
    src: Option<R>,
    ctx: RunContext,
    mut started: watch::Receiver<bool>,
) -> Vec<u8> {
    let Some(mut src) = src else { return vec![] };
    let mut held: Vec<u8> = vec![];
    let mut buf = vec![0u8; 64 * 1024];
    let mut open = true;
    let mut watching = true;
    loop {
        let go = *started.borrow();
        if go && !held.is_empty() {
            ctx.emit(EventKind::Output(Stream::Stderr, std::mem::take(&mut held))).await;
        }
        if !open {
            break;
        }
        tokio::select! {
            r = src.read(&mut buf) => match r {
                Ok(0) | Err(_) => open = false,
                Ok(n) => {
                    if *started.borrow() {
                        if !held.is_empty() {
                            ctx.emit(EventKind::Output(Stream::Stderr, std::mem::take(&mut held))).await;
                        }
                        ctx.emit(EventKind::Output(Stream::Stderr, buf[..n].to_vec())).await;
                    } else if held.len() < BEFORE_START {
                        let room = BEFORE_START - held.len();
                        held.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            },
            r = started.changed(), if !go && watching => {
                // The stdout side gone without a start: just keep reading.
                watching = r.is_ok();
            }
        }
    }
    if *started.borrow() {
        vec![]
    } else {
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> (RunContext, tokio::sync::mpsc::Receiver<crate::event::RunEvent>) {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        (RunContext { started: std::time::Instant::now(), tx, stop: Default::default() }, rx)
    }

    fn outputs(rx: &mut tokio::sync::mpsc::Receiver<crate::event::RunEvent>) -> (Vec<u8>, Vec<u8>) {
        let (mut o, mut e) = (vec![], vec![]);
        while let Ok(ev) = rx.try_recv() {
            if let EventKind::Output(s, b) = ev.kind {
                match s {
                    Stream::Stdout => o.extend(b),
                    Stream::Stderr => e.extend(b),
                }
            }
        }
        (o, e)
    }

    #[tokio::test]
    async fn the_marker_is_dropped_and_held_stderr_follows_the_start() {
        let (c, mut rx) = ctx();
        let (tx, srx) = watch::channel(false);
        let out: &[u8] = b"sandbench-started-ab\nhello\nsandbench-started-ab\n";
        let err: &[u8] = b"early\n";
        let (_, held) = tokio::join!(
            pump_stdout(Some(out), "sandbench-started-ab".into(), c.clone(), tx),
            pump_stderr(Some(err), c.clone(), srx)
        );
        assert!(held.is_empty());
        let (o, e) = outputs(&mut rx);
        assert_eq!(o, b"hello\nsandbench-started-ab\n", "only the first marker is the launcher's");
        assert_eq!(e, b"early\n");
    }

    #[tokio::test]
    async fn without_the_marker_stderr_is_the_tools_complaint() {
        let (c, mut rx) = ctx();
        let (tx, srx) = watch::channel(false);
        let out: &[u8] = b"";
        let err: &[u8] = b"Error: Failed to create bridge sockets\n";
        let (_, held) = tokio::join!(
            pump_stdout(Some(out), "sandbench-started-cd".into(), c.clone(), tx),
            pump_stderr(Some(err), c.clone(), srx)
        );
        assert_eq!(held, b"Error: Failed to create bridge sockets\n");
        assert_eq!(outputs(&mut rx), (vec![], vec![]), "nothing of the tool's reaches the program's output");
    }

    #[test]
    fn the_launcher_prints_its_marker_then_execs() {
        let (argv, marker) = launcher("/bin/sh").unwrap();
        let out =
            std::process::Command::new(&argv[0]).args(&argv[1..]).args(["/bin/echo", "program"]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{marker}\nprogram\n"));
        assert_ne!(launcher("/bin/sh").unwrap().1, marker, "a fresh marker per run");
    }
}
