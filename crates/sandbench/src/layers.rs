//! The front end's layers, kept by a test with the engine's scanner (the
//! same file, `sandbench-core/src/layers/scan.rs`): every source file of
//! this crate gets a layer from [`LAYERS`], and a file may name modules of
//! its own layer and the layers below, never one above. The engine's
//! modules, re-exported at this crate's root, are the engine's test's to
//! judge.

use std::path::Path;

#[path = "../../sandbench-core/src/layers/scan.rs"]
mod scan;

/// Bottom first; a module belongs to the entry with the longest matching
/// prefix. The workbench is Elm-shaped: plain types, then the views'
/// state and the messages that change it, then the widgets that draw the
/// views (from a `Scene` the app lends them), then the app that owns the
/// views and calls the widgets, then the loop that runs it all.
const LAYERS: &scan::Table = &[
    // What every front end shares: the error that means "bad input", the
    // arguments.
    ("front", &["error", "cli"]),
    // The workbench's plain types and the tools of its views: text made
    // inert, highlighting, themes, the editor's buffer, keys, scrolling.
    (
        "tui types",
        &["tui::types", "tui::sanitize", "tui::highlight", "tui::theme", "tui::editor", "tui::keymap", "tui::scroll"],
    ),
    // Each view's state and keys, and the messages the engine's updates
    // become (a gauntlet cell's message carries its view).
    (
        "views",
        &[
            "tui::view",
            "tui::msg",
            "tui::run_view",
            "tui::output_pane",
            "tui::agent_view",
            "tui::compare_view",
            "tui::gauntlet_view",
            "tui::runs_view",
            "tui::overlays",
        ],
    ),
    // Drawing: the views, the theme and the frame's facts, never the app.
    ("widgets", &["tui::widgets"]),
    ("app", &["tui::app"]),
    // What runs the workbench: the engine's runs for it, the event loop,
    // the headless driver, screenshots, the bench screen.
    ("loop", &["tui", "tui::engine", "tui::event_loop", "tui::headless", "tui::screenshot", "tui::bench_ui"]),
    // The commands (and this test).
    ("commands", &["cmd", "layers"]),
    // The binary: it names the library by its crate name, as any user does.
    ("binary", &["main", "bin::sandbench-sandbox"]),
];

const WHERE: &str = "LAYERS in crates/sandbench/src/layers.rs";

#[test]
fn no_front_end_layer_imports_a_higher_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = scan::crate_files(&src);
    assert!(files.len() > 40, "found only {} source files under {}", files.len(), src.display());
    let v = scan::violations(LAYERS, WHERE, &files);
    assert!(v.is_empty(), "{} upward import(s):\n{}", v.len(), v.join("\n"));
}

/// The table catches what this crate would do wrong: a widget reaching
/// into the app or the event loop, a view into the app, a type into a view.
#[test]
fn an_upward_front_end_import_is_named() {
    let file = |m: &str, src: &str| {
        let module: Vec<String> = m.split("::").map(String::from).collect();
        (module, (format!("src/{}.rs", m.replace("::", "/")), src.to_string()))
    };
    let files = [
        file("tui::widgets::side", "use crate::tui::app::App;\nuse crate::tui::event_loop::run;\n"),
        file("tui::gauntlet_view", "use super::keymap::Ctx;\nfn f(a: &crate::tui::app::App) {}\n"),
        file("tui::types", "use crate::runner::Update;\nuse super::msg::Msg;\n"),
        file("cli", "use crate::cmd::usage;\n"),
    ]
    .into_iter()
    .collect();
    let v = scan::violations(LAYERS, WHERE, &files);
    let joined = v.join("\n");
    assert_eq!(v.len(), 5, "{joined}");
    for want in [
        "src/tui/widgets/side.rs:1: `crate::tui::app::App` — tui::widgets::side (widgets) reaches up into tui::app::App (app)",
        "src/tui/widgets/side.rs:2: `crate::tui::event_loop::run` — tui::widgets::side (widgets) reaches up into tui::event_loop::run (loop)",
        "src/tui/gauntlet_view.rs:2: `crate::tui::app::App`",
        "src/tui/types.rs:2: `super::msg::Msg`",
        "src/cli.rs:1: `crate::cmd::usage`",
    ] {
        assert!(joined.contains(want), "{want}\n{joined}");
    }
}
