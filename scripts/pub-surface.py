#!/usr/bin/env python3
"""The engine's public surface, counted: `pub` items in the source files a
path from outside the crate can reach.

    scripts/pub-surface.py [CRATE_SRC_DIR]      (default: crates/sandbench-core/src)

A file is reachable when every `mod` on the way from lib.rs is `pub mod`
(`pub(crate) mod` and `mod` hide everything below). Counted: lines that
declare a `pub` fn, struct, enum, const, static, type, trait, mod or use,
outside `#[cfg(test)]` modules (fields and methods' visibility follow their
type's). Also printed: every `pub` item anywhere, and `pub(crate)` lines.
"""
import os, re, sys
src = sys.argv[1] if len(sys.argv) > 1 else "crates/sandbench-core/src"
def modfile(parent_file, name):
    d = os.path.dirname(parent_file)
    base = os.path.basename(parent_file)
    if base not in ('mod.rs', 'lib.rs'):
        d = os.path.join(d, base[:-3])
    for c in (os.path.join(d, name + '.rs'), os.path.join(d, name, 'mod.rs')):
        if os.path.exists(c): return c
    return None
def strip_tests(code):
    out = code
    for m in list(re.finditer(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{', code)):
        k = m.end()-1; depth = 0
        for j in range(k, len(code)):
            if code[j] == '{': depth += 1
            elif code[j] == '}':
                depth -= 1
                if depth == 0: break
        out = out[:m.start()] + ' ' * (j + 1 - m.start()) + out[j+1:]
    return out
reach = {}
def walk(f, public):
    code = strip_tests(open(f).read())
    reach[f] = public
    for m in re.finditer(r'(?m)^\s*(pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', code):
        vis = (m.group(1) or '').strip()
        prev = code[max(0, m.start()-30):m.start()]
        if '#[cfg(test)]' in prev: continue
        c = modfile(f, m.group(2))
        if c: walk(c, public and vis == 'pub')
walk(os.path.join(src, 'lib.rs'), True)
item = re.compile(r'(?m)^\s*pub (?:async |unsafe |const )*(fn|struct|enum|const|static|type|trait|mod|use)\b')
field = re.compile(r'(?m)^\s+pub \w+\s*:')
tot = sum(len(item.findall(strip_tests(open(f).read()))) for f, p in reach.items() if p)
allpub = sum(len(item.findall(strip_tests(open(f).read()))) for f in reach)
pc = sum(len(re.findall(r'(?m)^\s*pub\(crate\)', open(f).read())) for f in reach)
print(f"{src}: files {len(reach)}, reachable from outside {sum(reach.values())}; pub items in reachable files {tot}; pub items anywhere {allpub}; pub(crate) {pc}")
