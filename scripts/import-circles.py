#!/usr/bin/env python3
"""Import circles between the files of Kiln's library crates.

    scripts/import-circles.py [CRATE_DIR ...]   (default: the library crates)
    scripts/import-circles.py --edges [CRATE_DIR ...]   also print every edge

For each crate it builds a graph whose nodes are the crate's source files and
whose edges are the paths one file names into another, then prints every
strongly connected component of more than one file (an import circle). It
exits 1 when it finds one, 0 otherwise, so it can gate a check.

How a file maps to a module: `src/lib.rs` is the crate root, `src/a/b.rs` and
`src/a/b/mod.rs` are both module `a::b`.

What counts as an edge, from the file that holds the path:

* every path of a `use` item (use trees are expanded: `use crate::a::{b, c::D}`
  names `crate::a::b` and `crate::a::c::D`), re-exports of other modules'
  items included;
* every path written inline in code (`crate::a::b::f()`, `super::x::Y`);

where a path starts with `crate::`, `super::` (any number), `self::`, or
the name of a child module of the current module (`use cache::Cache` in
`lib.rs`). A path leads to the deepest module along it that is a file of the
crate: `crate::cache::stats::Stats` to `cache/stats.rs`, `crate::cache::Cache`
to `cache/mod.rs`. When the rest of the path names something that file only
brings in with a `use` (`crate::Error`, with `pub use error::Error` in
`lib.rs`; `super::Key`, with `use crate::key::Key` in the parent), the edge
follows that `use` to the file that defines it, so an item re-exported by a
parent leads to where it is defined, not to the parent. Paths into another
crate (`kiln_image::...`, `std::...`) are not edges.

A type named in a variant of an enum also leads to the module the path
names, as written: `tried: crate::library::Attempts` in `error.rs` leads to
`library/mod.rs` as well as to `library/attempt.rs` where `Attempts` is
defined (a name a `use` of the file binds is followed to the path of that
`use` first; a path through the crate root's re-exports is followed to the
module they name). An error enum that wraps a module's type makes that
module's face part of it, so a module whose error the enum carries must not
use the enum back, even when the type itself lives in a leaf file of that
module.

What does not count:

* `mod` declarations, and a module's `pub use` of its own descendants'
  items: a parent owns its children, and a `mod.rs` that only declares and
  re-exports them creates no edge (what it itself uses of them does);
* comments (doc links included), string and character literals;
* visibility restrictions (`pub(in crate::a)`);
* the bodies of `#[cfg(test)]` modules written inline: tests are not part of
  the structure (sibling `tests.rs` files are nodes of their own, and nothing
  imports them, so they are never in a circle).

Paths inside an inline module (`pub mod offsets { use super::X; }`) are
resolved from that inline module, then attributed to the file that holds it.
"""

import os
import re
import sys
from collections import defaultdict

LIBRARY_CRATES = ["core", "image-format", "cuda", "redis", "ship", "macros"]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """Blanks out comments and string/char literals, keeping line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 300])
        if m and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j + 1]))
            i = j + 1
            continue
        if c == "'":
            m = re.match(r"'(\\(x..|u\{[0-9a-fA-F]*\}|.)|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def drop_test_modules(code):
    """Blanks out `#[cfg(test)] mod name { ... }` bodies."""
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{")
    while True:
        m = pattern.search(code)
        if not m:
            return code
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[:m.start()] + re.sub(r"[^\n]", " ", code[m.start():j]) + code[j:]


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main") and len(rel) == 1:
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def parse_use_tree(tokens, pos, prefix, out):
    """Expands the use tree at tokens[pos:] into (path, name bound or None)
    pairs; returns the position after it."""
    path = list(prefix)
    while pos < len(tokens):
        tok = tokens[pos]
        if tok == "{":
            pos += 1
            while pos < len(tokens) and tokens[pos] != "}":
                pos = parse_use_tree(tokens, pos, path, out)
                if pos < len(tokens) and tokens[pos] == ",":
                    pos += 1
            return pos + 1
        if tok == "*":
            out.append((path, None))
            return pos + 1
        if tok == "::":
            pos += 1
            continue
        if re.fullmatch(IDENT, tok):
            path.append(tok)
            pos += 1
            if pos < len(tokens) and tokens[pos] == "::":
                continue
            name = path[-1] if path[-1] != "self" else (path[-2] if len(path) > 1 else None)
            if pos + 1 < len(tokens) and tokens[pos] == "as":
                name = tokens[pos + 1]
                pos += 2
            if path[-1] == "self":
                path = path[:-1]
            out.append((path, None if name == "_" else name))
            return pos
        return pos + 1
    return pos


def tokenize(code):
    return re.findall(r"::|" + IDENT + r"|[{}(),;*]", code)


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}
        for root, _, names in os.walk(src):
            for name in names:
                if name.endswith(".rs"):
                    path = os.path.join(root, name)
                    self.files[module_of(src, path)] = os.path.relpath(path, src)
        self.found = {}
        # Per file module: name -> absolute path it is bound to by a `use`
        # there (None: a path into another crate).
        self.bindings = defaultdict(dict)
        for module, rel in self.files.items():
            with open(os.path.join(self.src, rel), encoding="utf-8") as f:
                code = drop_test_modules(strip(f.read()))
            code = re.sub(r"pub\s*\(\s*in\s+[^)]*\)", "pub", code)
            self.found[module] = self.paths(module, code)
            for segs, _, ctx, name, _, _ in self.found[module]:
                if name is not None and ctx == module:
                    self.bindings[module][name] = self.absolute(ctx, segs)

    def children(self, module):
        return {m[-1] for m in self.files if len(m) == len(module) + 1 and m[:-1] == module}

    def absolute(self, module, segs):
        """The path from the crate root, or None for another crate's path."""
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] == "self":
            return module + tuple(segs[1:])
        if segs[0] == "super":
            base = module
            while segs and segs[0] == "super":
                if not base:
                    return None
                base, segs = base[:-1], segs[1:]
            return base + tuple(segs)
        if segs[0] in self.children(module):
            return module + tuple(segs)
        return None

    def target(self, path):
        """The file a path from the crate root leads to: the deepest file
        module along it, through the `use` bindings of that module (so an
        item re-exported by a parent leads to the file defining it)."""
        for _ in range(32):
            if path is None:
                return None
            file_module = ()
            for seg in path:
                if file_module + (seg,) in self.files:
                    file_module = file_module + (seg,)
                else:
                    break
            rest = path[len(file_module):]
            if rest and rest[0] in self.bindings[file_module]:
                bound = self.bindings[file_module][rest[0]]
                if bound is None:
                    return None
                if bound == path[:len(bound)]:
                    return file_module
                path = bound + rest[1:]
                continue
            return file_module
        return None

    def named(self, module, path):
        """The file a path from the crate root names as written: the deepest
        file module along it, without following that module's re-exports
        (but through the crate root's, which re-export every module's face)."""
        for _ in range(32):
            if path is None:
                return None
            file_module = ()
            for seg in path:
                if file_module + (seg,) in self.files:
                    file_module = file_module + (seg,)
                else:
                    break
            rest = path[len(file_module):]
            if file_module == () and rest and rest[0] in self.bindings[()]:
                bound = self.bindings[()][rest[0]]
                if bound is None or bound == path[:len(bound)]:
                    return None
                path = bound + rest[1:]
                continue
            return file_module or None
        return None

    def edges(self):
        result = defaultdict(set)
        for module in self.files:
            for segs, line, ctx, _, reexport, in_enum in self.found[module]:
                path = self.absolute(ctx, segs)
                if in_enum and len(segs) == 1:
                    # A bare name in an enum's variants: what the file's
                    # `use` binds it to.
                    path = self.bindings[ctx].get(segs[0])
                if in_enum:
                    named = self.named(module, path)
                    if named is not None and named != module[: len(named)]:
                        result[module].add((named, line))
                target = self.target(path)
                if reexport and path is not None and path[: len(module)] == module:
                    # A module re-exporting its own descendant's item: part
                    # of declaring its children, not a use of them.
                    continue
                if target is not None and target != module:
                    result[module].add((target, line))
        return result

    def paths(self, module, code):
        """(segments, line, module the path is written in, name it binds,
        whether it is a `pub use`, whether it is in an enum's variants) for
        each path of the file."""
        found = []
        # Inline modules: which (start, end) offsets belong to which module.
        scopes = []
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
            depth, j = 1, m.end()
            while j < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            scopes.append((m.end(), j, m.group(1)))

        enums = []
        for m in re.finditer(r"\benum\s+" + IDENT + r"[^{;]*\{", code):
            depth, j = 1, m.end()
            while j < len(code) and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            enums.append((m.end(), j))

        def in_enum(offset):
            return any(a <= offset < b for a, b in enums)

        def context(offset):
            inner = sorted(s for s in scopes if s[0] <= offset < s[1])
            return module + tuple(s[2] for s in inner)

        def line_of(offset):
            return code.count("\n", 0, offset) + 1

        use_spans = []
        for m in re.finditer(r"(\bpub\s*(\([^)]*\))?\s*)?\buse\s+([^;]*);", code):
            use_spans.append((m.start(), m.end()))
            reexport = m.group(1) is not None
            tokens = tokenize(m.group(3))
            trees = []
            pos = 0
            while pos < len(tokens):
                pos = parse_use_tree(tokens, pos, [], trees)
            for tree, name in trees:
                found.append(
                    (tree, line_of(m.start()), context(m.start()), name, reexport, False)
                )
        for m in re.finditer(
            r"(?<![A-Za-z0-9_:])(\$?" + IDENT + r")((?:\s*::\s*" + IDENT + r")+)", code
        ):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            head = m.group(1).lstrip("$")
            ctx = context(m.start())
            if head not in ("crate", "super", "self") and head not in self.children(ctx):
                continue
            segs = [head] + re.findall(IDENT, m.group(2))
            found.append((segs, line_of(m.start()), ctx, None, False, in_enum(m.start())))
        # Bare names in enum variants (`Io(IoError)`, `tried: Attempts`): kept
        # when a `use` of the file binds them (resolved in `edges`).
        for a, b in enums:
            for m in re.finditer(r"(?<![A-Za-z0-9_:$])(" + IDENT + r")(?!\s*::)", code[a:b]):
                found.append(([m.group(1)], line_of(a + m.start()), context(a + m.start()),
                              None, False, True))
        return found


def components(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main(argv):
    show_edges = "--edges" in argv
    crates = [a for a in argv if not a.startswith("--")] or LIBRARY_CRATES
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    total = 0
    for crate in crates:
        crate_dir = crate if os.path.isabs(crate) else os.path.join(root, crate)
        c = Crate(os.path.join(crate_dir, "src"))
        edges = c.edges()
        if show_edges:
            for a in sorted(edges):
                for b, line in sorted(edges[a]):
                    print(f"{crate}: {c.files[a]}:{line} -> {c.files[b]}")
        circles = [comp for comp in components(c.files, edges) if len(comp) > 1]
        for comp in sorted(circles, key=lambda comp: sorted(c.files[m] for m in comp)):
            total += 1
            members = set(comp)
            print(f"{crate}: circle of {len(comp)} files:")
            for m in sorted(comp, key=lambda m: c.files[m]):
                targets = defaultdict(list)
                for b, line in edges[m]:
                    if b in members:
                        targets[c.files[b]].append(line)
                for t in sorted(targets):
                    lines = ",".join(str(x) for x in sorted(targets[t]))
                    print(f"  {c.files[m]} -> {t} (lines {lines})")
    if total == 0:
        print("no import circles in " + ", ".join(crates))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
