//! Themes: `themes/*.toml` (UI palette plus a syntect theme name). The
//! shipped ones are built in; `--theme NAME` also finds
//! `<config dir>/sandbench/themes/NAME.toml`, and `--theme PATH.toml` a file.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context};
use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;

const BUILTIN: &[(&str, &str)] = &[
    ("dark", include_str!("../../../../themes/dark.toml")),
    ("light", include_str!("../../../../themes/light.toml")),
    ("contrast", include_str!("../../../../themes/contrast.toml")),
];

#[derive(Debug, Deserialize)]
struct ThemeFile {
    name: Option<String>,
    syntax: String,
    ui: Palette<String>,
}

macro_rules! palette {
    ($($field:ident),* $(,)?) => {
        /// The UI colours of a theme.
        #[derive(Debug, Clone, Deserialize)]
        pub struct Palette<C> { $(pub $field: C,)* }

        impl Palette<String> {
            fn parse(&self) -> anyhow::Result<Palette<Color>> {
                Ok(Palette { $($field: parse_color(stringify!($field), &self.$field)?,)* })
            }
        }
    };
}

palette!(
    bg,
    fg,
    dim,
    accent,
    border,
    border_focus,
    title,
    selection_bg,
    line_number,
    cursor_line,
    stdout,
    stderr,
    phase,
    note,
    violation,
    ok,
    warn,
    error,
    cpu,
    memory,
    gauge,
    key,
    keybar_bg,
    popup_bg,
);

fn parse_color(field: &str, s: &str) -> anyhow::Result<Color> {
    Color::from_str(s).map_err(|_| anyhow::anyhow!("colour '{s}' of '{field}' is not a colour name, #rrggbb or 0-255"))
}

#[derive(Debug, Clone)]
pub struct Theme {
    pub name: String,
    /// syntect theme name.
    pub syntax: String,
    pub ui: Palette<Color>,
}

impl Theme {
    /// Names of the built-in themes.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    pub fn parse(text: &str, fallback_name: &str) -> anyhow::Result<Theme> {
        let f: ThemeFile = toml::from_str(text)?;
        Ok(Theme { name: f.name.unwrap_or_else(|| fallback_name.to_string()), syntax: f.syntax, ui: f.ui.parse()? })
    }

    /// A built-in name, a theme in the config dir, or a path to a `.toml`.
    pub fn load(name_or_path: &str) -> anyhow::Result<Theme> {
        let as_path = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || name_or_path.contains('/') {
            let text = std::fs::read_to_string(as_path)
                .with_context(|| format!("cannot read theme file {}", as_path.display()))?;
            return Theme::parse(&text, name_or_path)
                .with_context(|| format!("theme file {} is not valid", as_path.display()));
        }
        if let Some(dir) = user_theme_dir() {
            let p = dir.join(format!("{name_or_path}.toml"));
            if let Ok(text) = std::fs::read_to_string(&p) {
                return Theme::parse(&text, name_or_path)
                    .with_context(|| format!("theme file {} is not valid", p.display()));
            }
        }
        match BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            Some((n, text)) => Theme::parse(text, n),
            None => bail!(
                "unknown theme '{name_or_path}' (built in: {}; or a path to a .toml file)",
                Theme::builtin_names().join(", ")
            ),
        }
    }

    pub fn dark() -> Theme {
        Theme::load("dark").expect("the built-in dark theme parses")
    }

    pub fn light() -> Theme {
        Theme::load("light").expect("the built-in light theme parses")
    }

    pub fn base(&self) -> Style {
        Style::new().fg(self.ui.fg).bg(self.ui.bg)
    }
    pub fn dim(&self) -> Style {
        Style::new().fg(self.ui.dim)
    }
    pub fn border(&self, focused: bool) -> Style {
        Style::new().fg(if focused { self.ui.border_focus } else { self.ui.border })
    }
    pub fn title(&self, focused: bool) -> Style {
        let s = Style::new().fg(if focused { self.ui.border_focus } else { self.ui.title });
        if focused {
            s.add_modifier(Modifier::BOLD)
        } else {
            s
        }
    }
    pub fn key(&self) -> Style {
        Style::new().fg(self.ui.key).add_modifier(Modifier::BOLD)
    }
    pub fn fg(&self, c: Color) -> Style {
        Style::new().fg(c)
    }
}

fn user_theme_dir() -> Option<PathBuf> {
    crate::config::Config::path().and_then(|p| p.parent().map(|d| d.join("themes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_name_syntect_themes_that_exist() {
        let set = syntect::highlighting::ThemeSet::load_defaults();
        for n in Theme::builtin_names() {
            let t = Theme::load(n).unwrap();
            assert_eq!(t.name, n);
            assert!(set.themes.contains_key(&t.syntax), "{n}: syntect has no theme '{}'", t.syntax);
        }
    }

    #[test]
    fn bad_themes_are_refused_with_a_reason() {
        assert!(Theme::load("nope").unwrap_err().to_string().contains("built in: dark, light, contrast"));
        let bad = include_str!("../../../../themes/dark.toml").replace("#1c1f26", "blurple");
        let e = Theme::parse(&bad, "x").unwrap_err();
        assert!(format!("{e:#}").contains("'blurple' of 'bg'"), "{e:#}");
    }

    /// WCAG's contrast ratio of two colours given as RGB.
    fn contrast(a: Color, b: Color) -> f64 {
        let lum = |c: Color| {
            let Color::Rgb(r, g, b) = c else { panic!("{c:?} is not an RGB colour") };
            let ch = |v: u8| {
                let v = f64::from(v) / 255.0;
                if v <= 0.03928 {
                    v / 12.92
                } else {
                    ((v + 0.055) / 1.055).powf(2.4)
                }
            };
            0.2126 * ch(r) + 0.7152 * ch(g) + 0.0722 * ch(b)
        };
        let (x, y) = (lum(a), lum(b));
        (x.max(y) + 0.05) / (x.min(y) + 0.05)
    }

    #[test]
    fn the_contrast_theme_keeps_every_colour_readable_on_a_projector() {
        let t = Theme::load("contrast").unwrap();
        let u = &t.ui;
        // Everything drawn on the ground, inactive borders included: AAA (7:1).
        for (what, c) in [
            ("fg", u.fg),
            ("dim", u.dim),
            ("accent", u.accent),
            ("border", u.border),
            ("border_focus", u.border_focus),
            ("title", u.title),
            ("line_number", u.line_number),
            ("stdout", u.stdout),
            ("stderr", u.stderr),
            ("phase", u.phase),
            ("note", u.note),
            ("violation", u.violation),
            ("ok", u.ok),
            ("warn", u.warn),
            ("error", u.error),
            ("cpu", u.cpu),
            ("memory", u.memory),
            ("gauge", u.gauge),
            ("key", u.key),
        ] {
            for (ground, g) in [("bg", u.bg), ("popup_bg", u.popup_bg), ("keybar_bg", u.keybar_bg)] {
                let r = contrast(c, g);
                assert!(r >= 7.0, "{what} on {ground}: {r:.1}:1");
            }
        }
        // Text stays readable on a selected line and the cursor's line.
        for ground in [u.selection_bg, u.cursor_line] {
            assert!(contrast(u.fg, ground) >= 7.0);
        }
        // The dark theme's inactive border is what vanished on a projector.
        let dark = Theme::dark();
        assert!(contrast(dark.ui.border, dark.ui.bg) < 3.0);
    }
}
