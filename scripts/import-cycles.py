#!/usr/bin/env python3
"""Import circles of one Rust crate: which source files reach each other.

    scripts/import-cycles.py [CRATE_SRC_DIR ...] [--all] [--no-tests] [--edges]

Default: crates/sandbench-core/src. Every `.rs` file is one node (its module
path from the file tree: `a/mod.rs` and `a.rs` are `a`, `lib.rs` is the
crate root). An edge A -> B when A names B: a `use crate::...`, a
`super::`/`self::` path, or a `crate::...` path written inline in code
(`crate::sanitize::inert_line(..)` depends on sanitize as surely as a `use`
does). A path is resolved to the longest module prefix that is a file; inline
`mod x { ... }` blocks are tracked so their `super::` means the file itself.
`#[cfg(test)]` modules are included unless `--no-tests` (tests may look
upwards without tying the engine in a knot).

Prints the strongly connected components with more than one file, largest
first, and the size of the largest (0 when the graph is acyclic). `--all`
lists every file of each circle; `--edges` prints the edges inside each
circle, to see which `use` to move.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(src):
    """Blank out comments, string and char literals, keeping newlines, so the
    scanners below see code only (a doc comment mentioning `crate::x` is not
    an import)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            hashes = m.group(1)
            end = src.find('"' + hashes, i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * src[i:end].count("\n"))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src[i:j + 1].count("\n"))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(rel):
    """Module path (tuple) of a file relative to the crate's src dir."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner, rest = tree[:start], tree[start + 1:k], tree[k + 1:]
                items, d, cur = [], 0, ""
                for ch2 in inner:
                    if ch2 == "," and d == 0:
                        items.append(cur)
                        cur = ""
                        continue
                    d += ch2 == "{"
                    d -= ch2 == "}"
                    cur += ch2
                items.append(cur)
                out = []
                for it in items:
                    if it:
                        out.extend(expand_use_tree(prefix + it + rest))
                    elif prefix:
                        out.append(prefix.rstrip(":"))
                return out
    return [tree]


def scan(path, code):
    """Yield (inline_module_stack, path_string) for every crate/super/self
    path in the file's code."""
    # Inline module blocks: positions of `mod name {` and their extents.
    stack = []  # (name, depth at which it closes)
    depth = 0
    events = []  # (pos, kind, data)
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
        events.append((m.end() - 1, "mod", m.group(1)))
    mods_at = {pos: name for pos, _, name in events}
    # Paths: `use` trees and inline paths.
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        for p in expand_use_tree(m.group(1)):
            p = re.sub(r"\bas\b.*$", "", p).strip(":")
            if p.startswith(("crate::", "super::", "self::")):
                found.append((m.start(), p))
    use_spans = [(m.start(), m.end()) for m in re.finditer(r"\buse\s+([^;]+);", code)]

    def in_use(pos):
        return any(a <= pos < b for a, b in use_spans)

    for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)", code):
        if not in_use(m.start()):
            found.append((m.start(), m.group(1)))
    # A child module named without `self::` (`docker::DockerTier::new(..)`
    # in `tier/mod.rs`, or `use docker::X`): 2018 paths start at names in
    # scope, and `mod docker;` puts the child there.
    children = set(re.findall(r"\bmod\s+(" + IDENT + r")\s*;", code))
    if children:
        alt = "|".join(sorted(children))
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:" + alt + r")(?:::" + IDENT + r")+)", code):
            found.append((m.start(), "self::" + m.group(1)))
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            for p in expand_use_tree(m.group(1)):
                p = re.sub(r"\bas\b.*$", "", p).strip(":")
                if p.split("::")[0] in children:
                    found.append((m.start(), "self::" + p))
    # Walk the code once for brace depth, attaching the module stack to
    # each found path.
    found.sort()
    fi = 0
    result = []
    for pos, ch in enumerate(code):
        while fi < len(found) and found[fi][0] <= pos:
            result.append((tuple(s[0] for s in stack), found[fi][1]))
            fi += 1
        if ch == "{":
            depth += 1
            if pos in mods_at:
                stack.append((mods_at[pos], depth))
        elif ch == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
    while fi < len(found):
        result.append((tuple(s[0] for s in stack), found[fi][1]))
        fi += 1
    return result


def strip_test_modules(code):
    """Blank `#[cfg(test)] mod name { ... }` blocks."""
    out = code
    for m in list(re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{", code)):
        start, k, depth = m.start(), m.end() - 1, 0
        for j in range(k, len(code)):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
        out = out[:start] + "".join(c if c == "\n" else " " for c in out[start:j + 1]) + out[j + 1:]
    return out


def build_graph(src_dir, no_tests=False):
    files = {}
    for root, _, names in os.walk(src_dir):
        for nm in names:
            if nm.endswith(".rs"):
                full = os.path.join(root, nm)
                files[module_of(os.path.relpath(full, src_dir))] = full
    edges = defaultdict(set)
    why = defaultdict(list)
    for mod, full in files.items():
        with open(full, encoding="utf-8") as f:
            code = strip_comments_and_strings(f.read())
        if no_tests:
            code = strip_test_modules(code)
        # A file's own module: for `a/mod.rs` and `a.rs` alike it is `a`;
        # `super` from it is `a`'s parent.
        for inline, p in scan(full, code):
            segs = p.split("::")
            base = list(mod) + list(inline)
            if segs[0] == "crate":
                target, segs = [], segs[1:]
            else:
                target = base
                while segs and segs[0] in ("self", "super"):
                    if segs[0] == "super":
                        target = target[:-1]
                    segs = segs[1:]
            full_path = list(target) + segs
            # Longest prefix that is a file's module.
            for k in range(len(full_path), -1, -1):
                cand = tuple(full_path[:k])
                if cand in files:
                    break
            if cand != mod:
                edges[mod].add(cand)
                why[(mod, cand)].append(p)
    return files, edges, why


def sccs(nodes, edges):
    index, low, on, st, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        st.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(mod, files, src_dir):
    return os.path.relpath(files[mod], src_dir)


def main(argv):
    flags = {a for a in argv if a.startswith("--")}
    dirs = [a for a in argv if not a.startswith("--")] or ["crates/sandbench-core/src"]
    worst = 0
    for src_dir in dirs:
        files, edges, why = build_graph(src_dir, "--no-tests" in flags)
        comps = sorted((c for c in sccs(files, edges) if len(c) > 1), key=len, reverse=True)
        largest = len(comps[0]) if comps else 0
        worst = max(worst, largest)
        print(f"{src_dir}: {len(files)} files, {sum(len(v) for v in edges.values())} edges, "
              f"{len(comps)} circle(s), largest {largest} files")
        for c in comps:
            names = sorted(name(m, files, src_dir) for m in c)
            shown = names if ("--all" in flags or len(names) <= 12) else names[:12] + ["..."]
            print(f"  circle of {len(c)}: {', '.join(shown)}")
            if "--edges" in flags:
                cs = set(c)
                for a in sorted(c):
                    for b in sorted(edges[a] & cs):
                        print(f"    {name(a, files, src_dir)} -> {name(b, files, src_dir)}  "
                              f"({', '.join(sorted(set(why[(a, b)]))[:3])})")
    return worst


if __name__ == "__main__":
    main(sys.argv[1:])
