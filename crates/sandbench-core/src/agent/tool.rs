//! The one tool the model gets, `run_code`, and the compact report it sees.

use serde_json::{json, Value};

use crate::report::{Outcome, RunReport};
use crate::spec::{format_size, Language, Limits};

pub(crate) const NAME: &str = "run_code";
/// Output the model sees per stream (head and tail kept).
pub(crate) const OUTPUT_BUDGET: usize = 4000;

/// `persistent`: the calls share one sandbox (a session), so files in the
/// working directory stay from one call to the next.
pub(crate) fn definition(persistent: bool) -> Value {
    let description = if persistent {
        "Run a program in an isolated sandbox and get its verdict: outcome, exit status, limit violations and \
         its stdout/stderr (long output is cut in the middle). All calls of this task share one sandbox with no \
         network: files written in the working directory (/work) are there for later calls; each call is a new \
         process, and processes it starts end with it."
    } else {
        "Run a program in a fresh, isolated sandbox and get its verdict: outcome, exit status, limit violations \
         and its stdout/stderr (long output is cut in the middle). Each call starts from an empty sandbox with no \
         network (unless the system prompt names hosts it may reach); nothing persists between calls."
    };
    json!({
        "name": NAME,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {
                "language": { "type": "string", "enum": Language::ALL.map(|l| l.name()), "description": "python (python3), sh (POSIX shell) or javascript (Node.js; ES module syntax runs as main.mjs)" },
                "code": { "type": "string", "description": "The complete program" }
            },
            "required": ["language", "code"]
        }
    })
}

pub(crate) fn system_prompt(tier: &str, limits: &Limits, persistent: bool) -> String {
    let (sandbox, persists) = if persistent {
        ("in one sandbox kept for this task", "files you write in /work stay for your later runs")
    } else {
        ("in a fresh sandbox", "nothing persists between runs")
    };
    format!(
        "You solve the user's task. You can run programs with the run_code tool; each runs on sandbench's '{tier}' \
         tier {sandbox} with {}, limited to {} wall time, {} CPU time, {} memory, {} processes and \
         {} of output. Programs print their results; {persists}. When you are done, answer without calling the tool.",
        network(limits),
        crate::spec::format_duration(limits.wall_time),
        crate::spec::format_duration(limits.cpu_time),
        format_size(limits.memory_bytes),
        limits.pids,
        format_size(limits.output_bytes),
    )
}

/// The network a program has, in words the model can act on.
fn network(limits: &Limits) -> String {
    if limits.network.is_none() {
        return "no network".into();
    }
    let hosts: Vec<String> = limits.network.entries().iter().map(|e| e.to_string()).collect();
    format!(
        "network access to {} only (HTTP and HTTPS through a proxy that HTTP_PROXY and HTTPS_PROXY point at; \
         a bare host means ports 80 and 443; no DNS in the sandbox)",
        hosts.join(", ")
    )
}

/// `{language, code}` from the model's tool input, or what is wrong with it.
pub(crate) fn parse_input(input: &Value) -> Result<(Language, String), String> {
    let lang = input
        .get("language")
        .and_then(|v| v.as_str())
        .ok_or("missing string field 'language' (python, sh or javascript)")?;
    let language: Language = lang.parse()?;
    let code = input.get("code").and_then(|v| v.as_str()).ok_or("missing string field 'code'")?;
    if code.trim().is_empty() {
        return Err("'code' is empty".into());
    }
    Ok((language, code.to_string()))
}

/// The run report as the model sees it.
pub(crate) fn compact_report(r: &RunReport) -> String {
    let mut s = format!("outcome: {}\nexit: {}\n", r.outcome.name(), r.exit.describe());
    if let Some(e) = &r.error {
        s.push_str(&format!("error: {e}\n"));
    }
    if r.violations.is_empty() {
        s.push_str("violations: none\n");
    } else {
        s.push_str("violations:\n");
        for v in &r.violations {
            s.push_str(&format!("- {} at {}: {}\n", v.kind.name(), crate::units::duration_ms(v.at_ms), v.detail));
        }
    }
    for b in &r.incomplete {
        s.push_str(&format!("incomplete: {} — {}\n", b.bound, b.detail));
    }
    s.push_str(&format!("time: {}\n", crate::units::duration_ms(r.timings_ms.total)));
    for (name, text, cut) in [("stdout", &r.stdout, r.stdout_truncated), ("stderr", &r.stderr, r.stderr_truncated)] {
        if text.is_empty() {
            s.push_str(&format!("{name}: (empty)\n"));
        } else {
            s.push_str(&format!(
                "{name} ({} bytes{}):\n{}\n",
                text.len(),
                if cut { ", stopped at the output limit" } else { "" },
                crate::sanitize::head_tail(text, OUTPUT_BUDGET).0
            ));
        }
    }
    s
}

/// A tool result is an error when sandbench could not run the program at all.
pub(crate) fn is_error(r: &RunReport) -> bool {
    r.outcome == Outcome::Error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_says_which_network_the_programs_have() {
        assert!(system_prompt("process", &Limits::default(), false).contains("with no network,"));
        let l = Limits { network: "allow=pypi.org".parse().unwrap(), ..Limits::default() };
        let p = system_prompt("process", &l, false);
        assert!(p.contains("network access to pypi.org only") && p.contains("HTTPS_PROXY"), "{p}");
    }

    #[test]
    fn input_is_validated() {
        assert!(parse_input(&json!({"language":"python","code":"print(1)"})).is_ok());
        assert!(parse_input(&json!({"language":"ruby","code":"p 1"})).unwrap_err().contains("unknown language"));
        assert!(parse_input(&json!({"language":"sh"})).is_err());
        assert!(parse_input(&json!({"language":"sh","code":"  "})).is_err());
        assert!(parse_input(&json!("echo")).is_err());
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let text = format!("{}{}", "a".repeat(10_000), "é".repeat(5000));
        let b = crate::sanitize::head_tail(&text, 1000).0;
        assert!(b.len() < 1100);
        assert!(b.starts_with("aaa") && b.ends_with("é"));
        assert!(b.contains("bytes omitted"));
        assert_eq!(crate::sanitize::head_tail("short", 1000).0, "short");
    }
}
