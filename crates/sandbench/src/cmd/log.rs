//! `sandbench log`: the run log (every run of every front end, also those of
//! other sandbench processes), filtered, as lines or as JSON.

use crate::cli::{Format, LogArgs};
use crate::config::Config;
use crate::report::Outcome;
use crate::runlog::{Entry, RunLog};
use crate::sanitize::inert_line;

use super::usage;

/// What `--tier`, `--outcome`, `--since` and `--front-end` keep.
#[derive(Debug, Default)]
pub struct Filter {
    pub tier: Option<String>,
    pub outcome: Option<Outcome>,
    pub since_ms: Option<i64>,
    pub front_end: Option<String>,
    pub session: Option<String>,
}

impl Filter {
    pub fn from_args(args: &LogArgs, now_ms: i64) -> anyhow::Result<Filter> {
        let outcome = match args.outcome.as_deref() {
            None => None,
            Some(s) => Some(parse_outcome(s).map_err(usage)?),
        };
        let since_ms = match args.since.as_deref() {
            None => None,
            Some(s) => Some(parse_since(s, now_ms).map_err(usage)?),
        };
        Ok(Filter {
            tier: args.tier.clone(),
            outcome,
            since_ms,
            front_end: args.front_end.clone(),
            session: args.session.clone(),
        })
    }

    pub fn keeps(&self, e: &Entry) -> bool {
        self.tier.as_deref().is_none_or(|t| e.tier == t)
            && self.outcome.is_none_or(|o| e.report.outcome == o)
            && self.since_ms.is_none_or(|s| e.unix_ms >= s)
            && self.front_end.as_deref().is_none_or(|f| e.front_end == f)
            && self.session.as_deref().is_none_or(|s| e.session.as_deref() == Some(s))
    }
}

fn parse_outcome(s: &str) -> Result<Outcome, String> {
    [Outcome::Ok, Outcome::Violation, Outcome::Incomplete, Outcome::Error, Outcome::Cancelled]
        .into_iter()
        .find(|o| o.name() == s)
        .ok_or_else(|| format!("invalid --outcome '{s}': expected ok, violation, incomplete, error or cancelled"))
}

/// `30m`, `2h`, `7d`, `90s` ago, or an RFC 3339 time; as unix milliseconds.
pub fn parse_since(s: &str, now_ms: i64) -> Result<i64, String> {
    let t = s.trim();
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(dt.timestamp_millis());
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: i64 = num.parse().map_err(|_| since_error(s))?;
    let unit_ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(since_error(s)),
    };
    n.checked_mul(unit_ms).map(|d| now_ms - d).ok_or_else(|| since_error(s))
}

fn since_error(s: &str) -> String {
    format!("invalid --since '{s}': expected a time ago (90s, 30m, 2h, 7d) or a UTC time (2026-12-01T10:00:00Z)")
}

/// One line per run. Everything from the log is untrusted (another process
/// wrote it; a program chose its output and code), so every field is made inert.
pub fn line(e: &Entry) -> String {
    let who = match &e.client {
        Some(c) => format!("{}({})", e.front_end, c),
        None => e.front_end.clone(),
    };
    let kinds: Vec<&str> = e.report.violations.iter().map(|v| v.kind.name()).collect();
    let first = e.code.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let first = match &e.report.session {
        Some(s) => format!("[{} #{}] {first}", inert_line(&s.id, 20), s.call),
        None => first.to_string(),
    };
    format!(
        "{}  {:<14} {:<9} {:<9} {:>9.1} ms  {:<16} {}",
        inert_line(&e.time, 30),
        inert_line(&who, 40),
        inert_line(&e.tier, 20),
        e.report.outcome.name(),
        e.report.timings_ms.total,
        inert_line(&kinds.join(","), 40),
        inert_line(&first, 80),
    )
}

pub async fn run(args: LogArgs, config: &Config) -> anyhow::Result<i32> {
    let Some(dir) = &config.state_dir else {
        return Err(usage("no state directory: set SANDBENCH_STATE_DIR"));
    };
    let log = RunLog::new(dir);
    let filter = Filter::from_args(&args, chrono::Utc::now().timestamp_millis())?;
    let (entries, bad) =
        log.read_all().map_err(|e| anyhow::anyhow!("cannot read the run log {}: {e}", log.path().display()))?;
    let mut kept: Vec<&Entry> = entries.iter().filter(|e| filter.keeps(e)).collect();
    if let Some(n) = args.last {
        let skip = kept.len().saturating_sub(n);
        kept.drain(..skip);
    }
    for e in &kept {
        match args.format {
            Format::Json => println!("{}", serde_json::to_string(e)?),
            Format::Text => println!("{}", line(e)),
        }
    }
    if args.format == Format::Text && kept.is_empty() {
        eprintln!("sandbench: no runs match in {}", log.path().display());
    }
    if bad > 0 {
        eprintln!("sandbench: skipped {bad} unreadable line(s) in the run log");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_ago_or_a_time() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_since("2h", now).unwrap(), now - 7_200_000);
        assert_eq!(parse_since("7d", now).unwrap(), now - 7 * 86_400_000);
        assert_eq!(parse_since("1970-01-01T00:00:01Z", now).unwrap(), 1000);
        assert!(parse_since("yesterday", now).unwrap_err().contains("invalid --since"));
        assert!(parse_since("5y", now).is_err());
        assert!(parse_outcome("violation").is_ok());
        assert!(parse_outcome("bad").unwrap_err().contains("expected ok"));
    }

    #[test]
    fn a_sessions_calls_are_filtered_and_named() {
        let spec = crate::spec::RunSpec::new(crate::spec::Language::Sh, "ls\n");
        let mut r = crate::report::RunReport::failed("docker", "sh", "-", "x");
        let alone = Entry::new("mcp", None, &spec, &r);
        r.session = Some(crate::session::SessionRef { id: "s-aaaaaaaaaaaa".into(), call: 3 });
        let inside = Entry::new("mcp", None, &spec, &r);
        let f = Filter { session: Some("s-aaaaaaaaaaaa".into()), ..Default::default() };
        assert!(f.keeps(&inside) && !f.keeps(&alone));
        assert!(line(&inside).contains("[s-aaaaaaaaaaaa #3] ls"), "{}", line(&inside));
    }
}
