//! The e2b tier's requests against what E2B's official SDK (`e2b` 2.63 on
//! PyPI) sends, checked on a local fake that answers like the real service:
//! the StartRequest's `stdin`, the v2 endpoints, envd routing, the Connect
//! deadline and how programs are started. Loopback only.

use std::time::Duration;

use crate::e2b_lifecycle::{assert_nothing_left, run_collect, tier, KEY};
use crate::support::fake_e2b::FakeE2b;
use sandbench::report::Outcome;
use sandbench::spec::{Language, RunSpec};

#[tokio::test]
async fn a_program_reading_stdin_gets_end_of_file_at_once() {
    // envd gives a process an open stdin pipe unless the Start says
    // `stdin: false` (the fake does the same): `cat` would then wait for
    // the wall-time kill, where every other tier hands it an empty stdin.
    let fake = FakeE2b::start(KEY).await;
    let mut spec = RunSpec::new(Language::Sh, "cat\necho done\n");
    spec.limits.wall_time = Duration::from_secs(20);
    let (_, r) = run_collect(tier(&fake), spec).await;
    assert_eq!(r.outcome, Outcome::Ok, "{r:#?}");
    assert_eq!(r.stdout, "done\n");
    assert_eq!(fake.state.lock().unwrap().start_messages[0]["stdin"], false);
    assert_nothing_left(&fake).await;
}
