//! The workbench: a ratatui app over the same runner every front end uses.
//!
//! - `app`: the coordinator — state shared by the views, routing of keys to
//!   the innermost view, intents and effects; no terminal (driven headless
//!   in tests). `view` is the contract views answer keys by.
//! - Views and overlays own their state and keys: `output_pane`,
//!   `compare_view`, `gauntlet_view` (F9), `agent_view` (F10), `runs_view`
//!   (F11), `overlays` (help, samples, limits, prompts); `scroll` is the one
//!   scroll position they share.
//! - `engine`: carries out effects (runs, probes, gauntlets, agent sessions)
//!   on tasks; `event_loop`: terminal, fixed frame rate, channels, signals;
//!   `bench_ui`: the flood benchmark through the same loop.
//! - `widgets`: drawing only; `keymap`: the one table of keys (help and key
//!   bar come from it); `editor`, `highlight`, `run_view`, `theme`;
//!   `screenshot`: the screen as SVG (^P).
//! - `types` (plain types such as `Level`, `Focus`, `View`) and `msg`
//!   (`Msg`, `Effect`) sit below the views, so views and `run_view` never
//!   import `app`; the widgets sit above the views and below the app: they
//!   draw from a `widgets::Scene` the app lends them (`App::scene`), and
//!   `App::prepare` calls their layout. `event_loop` / `headless` are the top.

pub mod agent_view;
pub mod app;
pub mod bench_ui;
pub mod compare_view;
pub mod editor;
pub mod engine;
pub mod event_loop;
pub mod gauntlet_view;
pub mod headless;
pub mod highlight;
pub mod keymap;
pub mod msg;
pub mod output_pane;
pub mod overlays;
pub mod run_view;
pub mod runs_view;
pub mod sanitize;
pub mod screenshot;
pub mod scroll;
pub mod theme;
pub mod types;
pub mod view;
pub mod widgets;

pub use bench_ui::bench_ui;
pub use event_loop::run;
