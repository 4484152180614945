//! The layer scanner: given a crate's table of layers and its source files,
//! every place a file names a module of a higher layer. A `use crate::…`,
//! a `super::…`, a child module or an inline `crate::…` path all count;
//! `#[cfg(test)]` modules are left out. Free of `crate::` paths so that the
//! front-end crate's layers test includes this same file (`#[path]`): the
//! only other crate it could live in, `sandbench-testkit`, is a proc-macro
//! crate and can export nothing but macros.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A crate's layers, bottom first: each a name and the module paths in it
/// (a module belongs to the entry with the longest matching prefix).
pub(super) type Table = [(&'static str, &'static [&'static str])];

/// The layer index of a module path (`["tier", "docker", "pool"]`), by the
/// longest prefix in `table`.
fn layer_of(table: &Table, module: &[String]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, mods)) in table.iter().enumerate() {
        for m in mods.iter() {
            let parts: Vec<&str> = m.split("::").collect();
            if parts.len() <= module.len()
                && parts.iter().zip(module).all(|(a, b)| *a == b)
                && best.is_none_or(|(len, _)| parts.len() > len)
            {
                best = Some((parts.len(), i));
            }
        }
    }
    best.map(|(_, i)| i)
}

/// Comments, strings and char literals blanked (newlines kept, for line
/// numbers): a doc comment that mentions `crate::runner` is no import.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, s: &[u8]| out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p);
            blank(&mut out, &b[i..end]);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &b[i..j]);
            i = j;
        } else if b[i] == b'r' && !prev_ident && matches!(b.get(i + 1), Some(b'"' | b'#')) {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = i + 2 + hashes;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            blank(&mut out, &b[i..end]);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, &b[i..end]);
            i = end;
        } else if b[i] == b'\'' {
            // A char literal ('a', '\n', '\u{1b}') or a lifetime ('a).
            let len = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                // One UTF-8 character, then the closing quote.
                let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match len {
                Some(n) => {
                    blank(&mut out, &b[i..i + n]);
                    i += n;
                }
                None => {
                    out.push(b[i]);
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    // Only ASCII bytes were blanked: the rest is as it came.
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `#[cfg(test)] mod name { ... }` blocks blanked.
fn without_test_modules(code: &str) -> String {
    let mut b = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(p) = code[from..].find("#[cfg(test)]") {
        let at = from + p;
        let rest = code[at + 12..].trim_start();
        let rest = rest.strip_prefix("pub(crate) ").or_else(|| rest.strip_prefix("pub ")).unwrap_or(rest);
        from = at + 12;
        let Some(after_mod) = rest.strip_prefix("mod ") else { continue };
        let name_len = after_mod.bytes().take_while(|&c| is_ident(c)).count();
        if !after_mod[name_len..].trim_start().starts_with('{') {
            continue;
        }
        let open = at + code[at..].find('{').unwrap_or(0);
        let mut depth = 0;
        for j in open..b.len() {
            match b[j] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        for c in &mut b[at..=j] {
                            if *c != b'\n' {
                                *c = b' ';
                            }
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Expand a use tree: `a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    // `x as y` renames: only `x` names a module.
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut kept = String::new();
    let mut w = 0;
    while w < words.len() {
        if words[w] == "as" {
            w += 2;
            continue;
        }
        kept.push_str(words[w]);
        w += 1;
    }
    let t = kept;
    let Some(open) = t.find('{') else {
        return vec![t.trim_end_matches("::").to_string()];
    };
    let (mut depth, mut close) = (0, t.len());
    for (k, c) in t.char_indices().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = k;
                    break;
                }
            }
            _ => {}
        }
    }
    let prefix = &t[..open];
    let inner = &t[open + 1..close.min(t.len())];
    let (mut items, mut cur, mut d) = (vec![], String::new(), 0);
    for c in inner.chars() {
        match c {
            ',' if d == 0 => items.push(std::mem::take(&mut cur)),
            '{' => {
                d += 1;
                cur.push(c)
            }
            '}' => {
                d -= 1;
                cur.push(c)
            }
            _ => cur.push(c),
        }
    }
    items.push(cur);
    items
        .into_iter()
        .filter(|i| !i.is_empty())
        .flat_map(|i| {
            if i == "self" {
                vec![prefix.trim_end_matches("::").to_string()]
            } else {
                expand(&format!("{prefix}{i}"))
            }
        })
        .collect()
}

/// One dependency of a file: the line, what it wrote, and the module path
/// it names (from the crate root).
struct Dep {
    line: usize,
    written: String,
    target: Vec<String>,
}

/// Every module a file names. `module` is the file's module path.
fn deps(module: &[String], code: &str) -> Vec<Dep> {
    let b = code.as_bytes();
    // Child modules declared here (`mod docker;`): named without `self::`.
    let children: Vec<String> = code
        .match_indices("mod ")
        .filter(|(i, _)| *i == 0 || !is_ident(b[i - 1]))
        .filter_map(|(i, _)| {
            let rest = &code[i + 4..];
            let n = rest.bytes().take_while(|&c| is_ident(c)).count();
            rest[n..].trim_start().starts_with(';').then(|| rest[..n].to_string())
        })
        .collect();
    // Inline `mod name {` blocks: the inline module path from each change on.
    let mut stack: Vec<(String, usize)> = vec![];
    let mut changes: Vec<(usize, Vec<String>)> = vec![(0, vec![])];
    let mut depth = 0usize;
    let mut pending: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"mod ") && (i == 0 || !is_ident(b[i - 1])) {
            let rest = &code[i + 4..];
            let n = rest.bytes().take_while(|&c| is_ident(c)).count();
            if rest[n..].trim_start().starts_with('{') {
                pending = Some(rest[..n].to_string());
            }
        }
        match b[i] {
            b'{' => {
                depth += 1;
                if let Some(name) = pending.take() {
                    stack.push((name, depth));
                    changes.push((i, stack.iter().map(|(n, _)| n.clone()).collect()));
                }
            }
            b'}' => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                    changes.push((i, stack.iter().map(|(n, _)| n.clone()).collect()));
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        i += 1;
    }
    let inline_at = |pos: usize| {
        let k = changes.partition_point(|(at, _)| *at <= pos);
        changes[k.saturating_sub(1)].1.clone()
    };
    let line_of = |pos: usize| code[..pos].bytes().filter(|&c| c == b'\n').count() + 1;
    let mut found: Vec<(usize, String)> = vec![];
    // `use` trees.
    let mut uses: Vec<(usize, usize)> = vec![];
    for (p, _) in code.match_indices("use ") {
        if p > 0 && is_ident(b[p - 1]) {
            continue;
        }
        let Some(end) = code[p..].find(';') else { continue };
        uses.push((p, p + end));
        for path in expand(&code[p + 4..p + end]) {
            found.push((p, path));
        }
    }
    // Inline paths starting at `crate`, `super`, `self` or a child module.
    let mut k = 0;
    while k < b.len() {
        if is_ident(b[k]) && (k == 0 || !(is_ident(b[k - 1]) || b[k - 1] == b':')) {
            let n = b[k..].iter().take_while(|&&c| is_ident(c) || c == b':').count();
            let path = code[k..k + n].trim_end_matches(':');
            let head = path.split("::").next().unwrap_or("");
            let in_use = uses.iter().any(|(a, e)| (*a..*e).contains(&k));
            if !in_use
                && path.contains("::")
                && (["crate", "super", "self"].contains(&head) || children.iter().any(|c| c == head))
            {
                found.push((k, path.to_string()));
            }
            k += n.max(1);
        } else {
            k += 1;
        }
    }
    found
        .into_iter()
        .filter_map(|(pos, path)| {
            let segs: Vec<&str> = path.split("::").collect();
            let head = segs[0];
            let mut here: Vec<String> = module.to_vec();
            here.extend(inline_at(pos));
            let mut target: Vec<String> = match head {
                "crate" => vec![],
                "super" | "self" => here.clone(),
                h if children.iter().any(|c| c == h) => module.to_vec(),
                _ => return None,
            };
            let mut rest = &segs[..];
            if head == "crate" {
                rest = &segs[1..];
            }
            while let Some(s) = rest.first() {
                match *s {
                    "super" => {
                        target.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
            target.extend(rest.iter().map(|s| s.to_string()));
            Some(Dep { line: line_of(pos), written: path, target })
        })
        .collect()
}

/// The module path of a file under `src/`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

pub(super) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read src").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every upward dependency in `files` (module path -> (file name, source)),
/// one line each; `table_at` says where the table is, for the fix. Paths
/// no layer holds (another crate's modules re-exported at this crate's
/// root) are not this table's to judge.
pub(super) fn violations(
    table: &Table,
    table_at: &str,
    files: &BTreeMap<Vec<String>, (String, String)>,
) -> Vec<String> {
    let mut out = vec![];
    for (module, (name, src)) in files {
        if module.is_empty() {
            continue; // lib.rs: declares the modules, imports nothing
        }
        let Some(own) = layer_of(table, module) else {
            out.push(format!("{name}: module `{}` has no layer: add it to {table_at}", module.join("::")));
            continue;
        };
        let code = without_test_modules(&code_only(src));
        for d in deps(module, &code) {
            let Some(theirs) = layer_of(table, &d.target) else { continue };
            if theirs > own {
                out.push(format!(
                    "{name}:{}: `{}` — {} ({}) reaches up into {} ({}); move the item down a layer or this code up ({table_at})",
                    d.line,
                    d.written,
                    module.join("::"),
                    table[own].0,
                    d.target.join("::"),
                    table[theirs].0,
                ));
            }
        }
    }
    out
}

/// Every `.rs` file under `src` by module path, as [`violations`] takes them
/// (file names `src/...`).
pub(super) fn crate_files(src: &Path) -> BTreeMap<Vec<String>, (String, String)> {
    let mut paths = vec![];
    rust_files(src, &mut paths);
    paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(src).expect("under src");
            let text = std::fs::read_to_string(p).expect("read source");
            (module_of(rel), (format!("src/{}", rel.display()), text))
        })
        .collect()
}
