//! The workbench: a ratatui app over the same runner every front end uses.
//!
//! - `app`: state and input handling, no terminal (driven headless in tests).
//! - `event_loop`: terminal, fixed frame rate, channels, runs, signals.
//! - `widgets`: drawing only; `keymap`: the one table of keys (help and key
//!   bar come from it); `editor`, `highlight`, `run_view`, `theme`.
//! - `gauntlet_view` / `agent_view`: the state of the gauntlet matrix (F9)
//!   and of the agent transcript (F10), folded from the engine's events.

pub mod agent_view;
pub mod app;
pub mod compare_view;
pub mod editor;
pub mod event_loop;
pub mod gauntlet_view;
pub mod headless;
pub mod highlight;
pub mod keymap;
pub mod output_pane;
pub mod overlays;
pub mod run_view;
pub mod runs_view;
pub mod sanitize;
pub mod scroll;
pub mod theme;
pub mod view;
pub mod widgets;

pub use event_loop::{bench_ui, run};
