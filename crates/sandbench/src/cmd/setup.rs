//! `sandbench setup TARGET`: build what a tier needs on this machine (images,
//! guest kernels, ...), through the engine's one entry point
//! (`tier::setup`, which each tier's own `setup` serves); this front end
//! only shows the progress. Idempotent: quick when nothing is missing.

use std::sync::Arc;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::cli::SetupArgs;
use crate::config::Config;
use crate::setup::{Progress, Step};
use crate::tier;

use super::usage;

/// Set-up progress on the terminal: spinners and bars on a terminal, plain
/// lines when stderr is not one (CI logs keep every step).
pub struct Bars {
    mp: MultiProgress,
}

impl Bars {
    pub fn new() -> Bars {
        Bars { mp: MultiProgress::new() }
    }
}

impl Default for Bars {
    fn default() -> Self {
        Bars::new()
    }
}

struct Bar(ProgressBar);

impl Progress for Bars {
    fn line(&self, text: &str) {
        if self.mp.is_hidden() {
            eprintln!("{text}");
        } else {
            let _ = self.mp.println(text);
        }
    }

    fn step(&self, text: &str, total: Option<u64>) -> Arc<dyn Step> {
        let pb = match total {
            Some(len) => {
                let pb = ProgressBar::new(len);
                pb.set_style(
                    ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                pb
            }
            None => {
                let pb = ProgressBar::new_spinner();
                pb.set_style(
                    ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                pb.enable_steady_tick(Duration::from_millis(120));
                pb
            }
        };
        let pb = self.mp.add(pb);
        pb.set_message(text.to_string());
        Arc::new(Bar(pb))
    }
}

impl Step for Bar {
    fn message(&self, text: &str) {
        self.0.set_message(text.to_string());
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
    fn elapsed_secs(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

pub async fn run(args: SetupArgs, config: &Config) -> anyhow::Result<i32> {
    let target = tier::setup_target(&args.target).map_err(usage)?;
    tier::setup(target, config, args.force, &Bars::new()).await?;
    Ok(0)
}
