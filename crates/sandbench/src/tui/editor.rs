//! The code buffer: lines of text, a cursor, a selection, undo/redo.
//! Columns are char indices; tabs are shown expanded (see `display_col`).

use std::cmp::{max, min};

/// Spaces a Tab key inserts (and Shift-Tab removes).
pub const INDENT: usize = 4;
const UNDO_DEPTH: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub row: usize,
    pub col: usize,
}

#[derive(Debug, Clone)]
struct Snapshot {
    lines: Vec<String>,
    cursor: Pos,
    doc: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EditKind {
    Insert,
    Delete,
    Other,
}

/// Cursor moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    Left,
    Right,
    Up,
    Down,
    WordLeft,
    WordRight,
    Home,
    End,
    PageUp,
    PageDown,
    Top,
    Bottom,
}

#[derive(Debug, Clone)]
pub struct Editor {
    lines: Vec<String>,
    pub cursor: Pos,
    /// Other end of the selection, when there is one.
    pub anchor: Option<Pos>,
    /// First visible row and display column.
    pub scroll: (usize, usize),
    /// Rows of the viewport (for page moves), set by the renderer's layout.
    pub page: usize,
    preferred_col: Option<usize>,
    undo: Vec<Snapshot>,
    redo: Vec<Snapshot>,
    last_edit: Option<EditKind>,
    /// Lowest row changed since the highlighter last looked.
    dirty_from: Option<usize>,
    /// The document and text last saved (or loaded): undo back to it is
    /// not a modification.
    saved: (u64, Vec<String>),
    /// Bumped by every change, so `modified` compares texts once per change.
    edits: u64,
    modified_at: std::cell::Cell<Option<(u64, bool)>>,
    doc: u64,
}

impl Default for Editor {
    fn default() -> Self {
        Editor::new("")
    }
}

fn byte_idx(s: &str, col: usize) -> usize {
    s.char_indices().nth(col).map(|(i, _)| i).unwrap_or(s.len())
}

fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// Display column of char `col` in `line` with tabs expanded to `tab`.
pub fn display_col(line: &str, col: usize, tab: usize) -> usize {
    let mut w = 0;
    for c in line.chars().take(col) {
        if c == '\t' {
            w += tab - w % tab;
        } else {
            w += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        }
    }
    w
}

impl Editor {
    pub fn new(text: &str) -> Editor {
        let mut lines: Vec<String> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_string()).collect();
        if lines.is_empty() {
            lines.push(String::new());
        }
        Editor {
            cursor: Pos::default(),
            anchor: None,
            scroll: (0, 0),
            page: 20,
            preferred_col: None,
            undo: vec![],
            redo: vec![],
            last_edit: None,
            dirty_from: Some(0),
            saved: (0, lines.clone()),
            edits: 0,
            modified_at: std::cell::Cell::new(None),
            doc: 0,
            lines,
        }
    }

    /// The text differs from the one last saved (or loaded): `[+]`, and
    /// quitting or loading a sample asks first.
    pub fn modified(&self) -> bool {
        if let Some((at, m)) = self.modified_at.get() {
            if at == self.edits {
                return m;
            }
        }
        let m = self.saved.0 != self.doc || self.saved.1 != self.lines;
        self.modified_at.set(Some((self.edits, m)));
        m
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    pub fn text(&self) -> String {
        self.lines.join("\n")
    }

    /// Which document the text belongs to: an id the owner gives with
    /// [`Editor::set_document`]. Undo and redo bring it back with the text,
    /// so the owner can restore the file name and language that go with it.
    pub fn doc(&self) -> u64 {
        self.doc
    }

    /// Replace everything with another document's text; undoable.
    pub fn set_document(&mut self, text: &str, doc: u64) {
        self.set_text(text);
        self.doc = doc;
    }

    /// Replace everything (open a file, load a sample); undoable.
    pub fn set_text(&mut self, text: &str) {
        self.checkpoint(EditKind::Other);
        let fresh = Editor::new(text);
        self.lines = fresh.lines;
        self.cursor = Pos::default();
        self.anchor = None;
        self.scroll = (0, 0);
        self.mark_dirty(0);
    }

    /// The lowest row changed since the last call.
    pub fn take_dirty(&mut self) -> Option<usize> {
        self.dirty_from.take()
    }

    fn mark_dirty(&mut self, row: usize) {
        self.dirty_from = Some(self.dirty_from.map_or(row, |d| min(d, row)));
        self.edits += 1;
    }

    fn checkpoint(&mut self, kind: EditKind) {
        // Consecutive typing (or deleting) is one undo step.
        if kind != EditKind::Other && self.last_edit == Some(kind) {
            return;
        }
        self.undo.push(Snapshot { lines: self.lines.clone(), cursor: self.cursor, doc: self.doc });
        if self.undo.len() > UNDO_DEPTH {
            self.undo.remove(0);
        }
        self.redo.clear();
        self.last_edit = Some(kind);
    }

    pub fn undo(&mut self) -> bool {
        self.swap_history(true)
    }

    pub fn redo(&mut self) -> bool {
        self.swap_history(false)
    }

    fn swap_history(&mut self, undo: bool) -> bool {
        let (from, to) = if undo { (&mut self.undo, &mut self.redo) } else { (&mut self.redo, &mut self.undo) };
        let Some(s) = from.pop() else { return false };
        to.push(Snapshot { lines: std::mem::replace(&mut self.lines, s.lines), cursor: self.cursor, doc: self.doc });
        self.cursor = s.cursor;
        self.doc = s.doc;
        self.anchor = None;
        self.last_edit = None;
        self.clamp();
        self.mark_dirty(0);
        true
    }

    fn clamp(&mut self) {
        self.cursor.row = min(self.cursor.row, self.lines.len() - 1);
        self.cursor.col = min(self.cursor.col, char_len(&self.lines[self.cursor.row]));
    }

    /// Ordered selection bounds, when a non-empty selection exists.
    pub fn selection(&self) -> Option<(Pos, Pos)> {
        let a = self.anchor?;
        (a != self.cursor).then(|| (min(a, self.cursor), max(a, self.cursor)))
    }

    pub fn selected_text(&self) -> Option<String> {
        let (s, e) = self.selection()?;
        Some(self.text_between(s, e))
    }

    fn text_between(&self, s: Pos, e: Pos) -> String {
        if s.row == e.row {
            let l = &self.lines[s.row];
            return l[byte_idx(l, s.col)..byte_idx(l, e.col)].to_string();
        }
        let mut out = String::new();
        let first = &self.lines[s.row];
        out.push_str(&first[byte_idx(first, s.col)..]);
        for r in s.row + 1..e.row {
            out.push('\n');
            out.push_str(&self.lines[r]);
        }
        out.push('\n');
        let last = &self.lines[e.row];
        out.push_str(&last[..byte_idx(last, e.col)]);
        out
    }

    /// Delete the selection (no checkpoint). Returns whether there was one.
    fn delete_selection_raw(&mut self) -> bool {
        let Some((s, e)) = self.selection() else {
            self.anchor = None;
            return false;
        };
        let tail = {
            let last = &self.lines[e.row];
            last[byte_idx(last, e.col)..].to_string()
        };
        let first = &mut self.lines[s.row];
        first.truncate(byte_idx(first, s.col));
        first.push_str(&tail);
        self.lines.drain(s.row + 1..=e.row);
        self.cursor = s;
        self.anchor = None;
        self.mark_dirty(s.row);
        true
    }

    pub fn delete_selection(&mut self) -> bool {
        if self.selection().is_none() {
            return false;
        }
        self.checkpoint(EditKind::Other);
        self.delete_selection_raw()
    }

    pub fn select_all(&mut self) {
        self.anchor = Some(Pos::default());
        let row = self.lines.len() - 1;
        self.cursor = Pos { row, col: char_len(&self.lines[row]) };
    }

    pub fn insert_char(&mut self, c: char) {
        if c == '\n' {
            return self.newline();
        }
        let kind = if self.selection().is_some() || c == ' ' { EditKind::Other } else { EditKind::Insert };
        self.checkpoint(kind);
        self.delete_selection_raw();
        let Pos { row, col } = self.cursor;
        let line = &mut self.lines[row];
        line.insert(byte_idx(line, col), c);
        self.cursor.col += 1;
        self.preferred_col = None;
        self.mark_dirty(row);
    }

    /// Insert text (paste): one undo step, newlines split lines, CR dropped.
    pub fn insert_str(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        self.checkpoint(EditKind::Other);
        self.delete_selection_raw();
        let Pos { row, col } = self.cursor;
        let line = &mut self.lines[row];
        let at = byte_idx(line, col);
        let tail = line.split_off(at);
        let mut parts = text.split('\n');
        line.push_str(parts.next().unwrap_or(""));
        let mut r = row;
        for p in parts {
            r += 1;
            self.lines.insert(r, p.to_string());
        }
        let end_col = char_len(&self.lines[r]);
        self.lines[r].push_str(&tail);
        self.cursor = Pos { row: r, col: end_col };
        self.last_edit = None;
        self.mark_dirty(row);
    }

    /// Enter: split the line, keep its indentation, indent after a `:`.
    pub fn newline(&mut self) {
        self.checkpoint(EditKind::Other);
        self.delete_selection_raw();
        let Pos { row, col } = self.cursor;
        let line = &mut self.lines[row];
        let at = byte_idx(line, col);
        let tail = line.split_off(at);
        let mut indent: String = line.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
        if line.trim_end().ends_with(':') {
            indent.push_str(&" ".repeat(INDENT));
        }
        let new_col = char_len(&indent);
        self.lines.insert(row + 1, indent + tail.trim_start_matches([' ', '\t']));
        self.cursor = Pos { row: row + 1, col: new_col };
        self.preferred_col = None;
        self.mark_dirty(row);
    }

    /// Tab: indent the selected lines, or insert spaces to the next stop.
    pub fn tab(&mut self) {
        if let Some((s, e)) = self.selection() {
            self.checkpoint(EditKind::Other);
            for r in s.row..=e.row {
                self.lines[r].insert_str(0, &" ".repeat(INDENT));
            }
            self.anchor = Some(Pos { row: s.row, col: 0 });
            self.cursor = Pos { row: e.row, col: char_len(&self.lines[e.row]) };
            self.mark_dirty(s.row);
            return;
        }
        let n = INDENT - self.cursor.col % INDENT;
        for _ in 0..n {
            self.insert_char(' ');
        }
    }

    /// Shift-Tab: remove up to one indent from the current or selected lines.
    pub fn dedent(&mut self) {
        let (s, e) = self.selection().unwrap_or((self.cursor, self.cursor));
        self.checkpoint(EditKind::Other);
        for r in s.row..=e.row {
            let n = self.lines[r].chars().take(INDENT).take_while(|c| *c == ' ').count();
            self.lines[r].drain(..n);
            if r == self.cursor.row {
                self.cursor.col = self.cursor.col.saturating_sub(n);
            }
        }
        if let Some(a) = &mut self.anchor {
            a.col = min(a.col, char_len(&self.lines[a.row]));
        }
        self.mark_dirty(s.row);
    }

    pub fn backspace(&mut self) {
        if self.selection().is_some() {
            self.delete_selection();
            return;
        }
        self.anchor = None;
        let Pos { row, col } = self.cursor;
        if col == 0 && row == 0 {
            return;
        }
        self.checkpoint(EditKind::Delete);
        if col == 0 {
            let line = self.lines.remove(row);
            let prev = &mut self.lines[row - 1];
            let c = char_len(prev);
            prev.push_str(&line);
            self.cursor = Pos { row: row - 1, col: c };
            self.mark_dirty(row - 1);
        } else {
            // Delete back to the previous indent stop inside leading spaces.
            let line = &mut self.lines[row];
            let leading = line.chars().take_while(|c| *c == ' ').count();
            let n = if col <= leading && col > 0 { (col - 1) % INDENT + 1 } else { 1 };
            let from = byte_idx(line, col - n);
            let to = byte_idx(line, col);
            line.replace_range(from..to, "");
            self.cursor.col -= n;
            self.mark_dirty(row);
        }
        self.preferred_col = None;
    }

    pub fn delete(&mut self) {
        if self.selection().is_some() {
            self.delete_selection();
            return;
        }
        self.anchor = None;
        let Pos { row, col } = self.cursor;
        let len = char_len(&self.lines[row]);
        if col == len && row + 1 == self.lines.len() {
            return;
        }
        self.checkpoint(EditKind::Delete);
        if col == len {
            let next = self.lines.remove(row + 1);
            self.lines[row].push_str(&next);
        } else {
            let line = &mut self.lines[row];
            let i = byte_idx(line, col);
            line.remove(i);
        }
        self.mark_dirty(row);
    }

    /// Cut the selection, or the whole line when nothing is selected.
    pub fn cut(&mut self) -> Option<String> {
        if let Some(t) = self.selected_text() {
            self.delete_selection();
            return Some(t);
        }
        self.checkpoint(EditKind::Other);
        let row = self.cursor.row;
        let t = if self.lines.len() > 1 { self.lines.remove(row) } else { std::mem::take(&mut self.lines[0]) };
        self.clamp();
        self.cursor.col = 0;
        self.mark_dirty(row.saturating_sub(1));
        Some(t + "\n")
    }

    /// Move the cursor; with `select`, extend the selection.
    pub fn move_cursor(&mut self, m: Move, select: bool) {
        if select {
            if self.anchor.is_none() {
                self.anchor = Some(self.cursor);
            }
        } else if let Some((s, e)) = self.selection() {
            // Left/Right without shift collapse the selection to its edge.
            self.anchor = None;
            match m {
                Move::Left => {
                    self.cursor = s;
                    return;
                }
                Move::Right => {
                    self.cursor = e;
                    return;
                }
                _ => {}
            }
        } else {
            self.anchor = None;
        }
        self.last_edit = None;
        let Pos { row, col } = self.cursor;
        let len = |r: usize| char_len(&self.lines[r]);
        let last = self.lines.len() - 1;
        let vertical = matches!(m, Move::Up | Move::Down | Move::PageUp | Move::PageDown);
        let want = self.preferred_col.unwrap_or(col);
        self.cursor = match m {
            Move::Left if col > 0 => Pos { row, col: col - 1 },
            Move::Left if row > 0 => Pos { row: row - 1, col: len(row - 1) },
            Move::Left => self.cursor,
            Move::Right if col < len(row) => Pos { row, col: col + 1 },
            Move::Right if row < last => Pos { row: row + 1, col: 0 },
            Move::Right => self.cursor,
            Move::Up if row > 0 => Pos { row: row - 1, col: min(want, len(row - 1)) },
            Move::Up => Pos { row: 0, col: 0 },
            Move::Down if row < last => Pos { row: row + 1, col: min(want, len(row + 1)) },
            Move::Down => Pos { row, col: len(row) },
            Move::PageUp => {
                let r = row.saturating_sub(self.page.max(1));
                Pos { row: r, col: min(want, len(r)) }
            }
            Move::PageDown => {
                let r = min(last, row + self.page.max(1));
                Pos { row: r, col: min(want, len(r)) }
            }
            Move::Home => {
                // Smart home: first non-blank, then column 0.
                let first = self.lines[row].chars().take_while(|c| c.is_whitespace()).count();
                Pos { row, col: if col == first { 0 } else { first } }
            }
            Move::End => Pos { row, col: len(row) },
            Move::Top => Pos::default(),
            Move::Bottom => Pos { row: last, col: len(last) },
            Move::WordLeft => self.word_left(),
            Move::WordRight => self.word_right(),
        };
        self.preferred_col = if vertical { Some(want) } else { None };
    }

    fn word_left(&self) -> Pos {
        let Pos { row, col } = self.cursor;
        if col == 0 {
            return if row > 0 { Pos { row: row - 1, col: char_len(&self.lines[row - 1]) } } else { self.cursor };
        }
        let chars: Vec<char> = self.lines[row].chars().collect();
        let mut c = col;
        while c > 0 && !chars[c - 1].is_alphanumeric() && chars[c - 1] != '_' {
            c -= 1;
        }
        while c > 0 && (chars[c - 1].is_alphanumeric() || chars[c - 1] == '_') {
            c -= 1;
        }
        Pos { row, col: c }
    }

    fn word_right(&self) -> Pos {
        let Pos { row, col } = self.cursor;
        let chars: Vec<char> = self.lines[row].chars().collect();
        if col >= chars.len() {
            return if row + 1 < self.lines.len() { Pos { row: row + 1, col: 0 } } else { self.cursor };
        }
        let mut c = col;
        while c < chars.len() && (chars[c].is_alphanumeric() || chars[c] == '_') {
            c += 1;
        }
        while c < chars.len() && !chars[c].is_alphanumeric() && chars[c] != '_' {
            c += 1;
        }
        Pos { row, col: c }
    }

    /// Keep the cursor inside a viewport of `rows` × `cols` display columns.
    pub fn scroll_to_cursor(&mut self, rows: usize, cols: usize, tab: usize) {
        self.page = rows.saturating_sub(1).max(1);
        let (mut top, mut left) = self.scroll;
        let r = self.cursor.row;
        if r < top {
            top = r;
        } else if rows > 0 && r >= top + rows {
            top = r + 1 - rows;
        }
        let dc = display_col(&self.lines[r], self.cursor.col, tab);
        if dc < left {
            left = dc;
        } else if cols > 0 && dc >= left + cols {
            left = dc + 1 - cols;
        }
        self.scroll = (top, left);
    }

    pub fn mark_saved(&mut self) {
        self.saved = (self.doc, self.lines.clone());
        self.edits += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typing_undo_redo() {
        let mut e = Editor::new("");
        for c in "print(1)".chars() {
            e.insert_char(c);
        }
        e.newline();
        for c in "x".chars() {
            e.insert_char(c);
        }
        assert_eq!(e.text(), "print(1)\nx");
        assert!(e.undo());
        assert_eq!(e.text(), "print(1)\n");
        assert!(e.undo());
        assert_eq!(e.text(), "print(1)");
        assert!(e.undo());
        assert_eq!(e.text(), "");
        assert!(!e.undo());
        assert!(e.redo());
        assert!(e.redo());
        assert_eq!(e.text(), "print(1)\n");
    }

    #[test]
    fn undo_back_to_the_saved_text_is_not_a_modification() {
        let mut e = Editor::new("print(1)");
        assert!(!e.modified());
        e.insert_char('x');
        assert!(e.modified());
        assert!(e.undo());
        assert!(!e.modified(), "back to the text as loaded: no [+]");
        assert!(e.redo());
        assert!(e.modified());
        // Saved with the edit: undoing it is a change from what is on disk.
        e.mark_saved();
        assert!(!e.modified());
        assert!(e.undo());
        assert!(e.modified());
        // Another document with the same text is not the saved one.
        e.redo();
        let text = e.text();
        e.set_document(&text, 7);
        assert!(e.modified());
    }

    #[test]
    fn selection_copy_cut_paste() {
        let mut e = Editor::new("abc\ndef\nghi");
        e.move_cursor(Move::Right, false);
        e.move_cursor(Move::Down, true);
        assert_eq!(e.selected_text().unwrap(), "bc\nd");
        let t = e.cut().unwrap();
        assert_eq!(e.text(), "aef\nghi");
        e.move_cursor(Move::Bottom, false);
        e.insert_str(&t);
        assert_eq!(e.text(), "aef\nghibc\nd");
        assert_eq!(e.cursor, Pos { row: 2, col: 1 });
        e.select_all();
        e.insert_char('z');
        assert_eq!(e.text(), "z");
        e.undo();
        assert_eq!(e.text(), "aef\nghibc\nd");
    }

    #[test]
    fn indentation() {
        let mut e = Editor::new("if x:");
        e.move_cursor(Move::End, false);
        e.newline();
        assert_eq!(e.text(), "if x:\n    ");
        e.insert_char('y');
        e.newline();
        assert_eq!(e.lines()[2], "    ");
        e.backspace();
        assert_eq!(e.lines()[2], "");
        e.tab();
        assert_eq!(e.lines()[2], "    ");
        e.dedent();
        assert_eq!(e.lines()[2], "");
    }

    #[test]
    fn moves_keep_column_and_clamp() {
        let mut e = Editor::new("long line\nx\nlong line");
        e.move_cursor(Move::End, false);
        e.move_cursor(Move::Down, false);
        assert_eq!(e.cursor, Pos { row: 1, col: 1 });
        e.move_cursor(Move::Down, false);
        assert_eq!(e.cursor, Pos { row: 2, col: 9 });
        e.move_cursor(Move::WordLeft, false);
        assert_eq!(e.cursor.col, 5);
        e.move_cursor(Move::Home, false);
        assert_eq!(e.cursor.col, 0);
        e.backspace();
        assert_eq!(e.text(), "long line\nxlong line");
        e.move_cursor(Move::Top, false);
        e.move_cursor(Move::Left, false);
        e.delete();
        assert_eq!(e.lines()[0], "ong line");
    }

    #[test]
    fn multibyte_and_tabs() {
        let mut e = Editor::new("é\tx");
        e.move_cursor(Move::End, false);
        assert_eq!(display_col(&e.lines()[0], e.cursor.col, 4), 5);
        e.backspace();
        e.backspace();
        assert_eq!(e.text(), "é");
        e.backspace();
        assert_eq!(e.text(), "");
    }
}
