//! The layers of `src/` import only downward, with no cycle between modules, and `unsafe`
//! lives only in `host/`: `protocol` <- `host` <- `queue` <- `runtime` <- `commands` <- `lib.rs`;
//! the console's (`console/src`) likewise: `deployment` <- `overview` <- `history`, `flow`
//! <- `top`, `web` <- `cli` (docs/architecture.md). `make lint` runs this suite; it reads the
//! sources, no server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Layers, lowest first, each a group of top-level modules: a module may use its own layer and
/// those before it. A module in no layer counts as the highest.
type Layers = &'static [&'static [&'static str]];

/// The module's layers.
const MODULE: Layers = &[
    &["protocol"],
    &["host"],
    &["queue"],
    &["runtime"],
    &["commands"],
    &["lib"],
];

/// The console's layers: what everything uses, the deployment, the queries, the samples over
/// time, a job's flow and a queue's groups (read through the queries), what is rendered of
/// those (the metrics, a flow's text), the two live views, the subcommands, and the crate
/// root and binary.
const CONSOLE: Layers = &[
    &["error", "escape", "exposition", "waits"],
    &["deployment"],
    &["overview"],
    &["history", "flow", "groups", "latency"],
    &["metrics", "flow_text"],
    &["top", "web"],
    &["cli"],
    &["lib", "main"],
];

fn rank(layers: Layers, module: &str) -> usize {
    let top = module.split("::").next().unwrap_or("");
    layers
        .iter()
        .position(|group| group.contains(&top))
        .unwrap_or(layers.len())
}

/// Every `.rs` file under `dir`, by module path (`lib` for the crate root).
fn sources(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("src/ is readable") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(dir).expect("under src/");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let module = if parts == ["lib"] {
                "lib".to_string()
            } else {
                parts.join("::")
            };
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.insert(module, text);
        }
    }
    out
}

/// The code of a file: comments and string literals blanked out, and its inline test module
/// (`#[cfg(test)] mod tests { ... }`, always last) left off.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => {
                i += 3; // a char literal such as '{'
                out.push_str("' '");
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d as e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        return vec![path.to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(expand)
        .map(|p| match p.as_str() {
            "self" => prefix.to_string(),
            _ => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every path a file names from the crate: `use` trees and `crate::`/`super::` paths in code,
/// made absolute (without the `crate::`).
fn references(module: &str, code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        paths.extend(expand(&rest[..end]));
        rest = &rest[end..];
    }
    for marker in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(marker) {
            let start = from + i;
            let before = code[..start].chars().last();
            from = start + marker.len();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let tail: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(tail);
        }
    }
    // The module a `super::` path is relative to: the parent of this file's module.
    let parent: Vec<&str> = match module {
        "lib" => Vec::new(),
        m => {
            let mut p: Vec<&str> = m.split("::").collect();
            p.pop();
            p
        }
    };
    paths
        .into_iter()
        .filter_map(|p| {
            let p = p.trim_start_matches('$').trim_end_matches(':');
            if let Some(r) = p.strip_prefix("crate::") {
                Some(r.to_string())
            } else if p.starts_with("super::") {
                let mut base = parent.clone();
                let mut r = p;
                while let Some(next) = r.strip_prefix("super::") {
                    r = next;
                    if r.starts_with("super::") {
                        base.pop();
                    }
                }
                base.push(r);
                Some(base.join("::"))
            } else {
                None
            }
        })
        .collect()
}

/// The names a module re-exports from a child (`pub use child::{A, B}`), as name -> child.
fn reexports(module: &str, code: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = code;
    while let Some(i) = rest.find("pub use ") {
        rest = &rest[i + 8..];
        let end = rest.find(';').unwrap_or(rest.len());
        for path in expand(&rest[..end]) {
            let mut parts: Vec<&str> = path.split("::").collect();
            let name = parts.pop().unwrap_or("").to_string();
            let child = match module {
                "lib" => parts.join("::"),
                m => format!("{m}::{}", parts.join("::")),
            };
            out.insert(name, child);
        }
        rest = &rest[end..];
    }
    out
}

/// The module a path lands in: its longest prefix that is a module, through re-exports.
fn resolve(path: &str, modules: &BTreeMap<String, BTreeMap<String, String>>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    for n in (1..=parts.len()).rev() {
        let m = parts[..n].join("::");
        if let Some(exports) = modules.get(&m) {
            if let Some(child) = parts.get(n).and_then(|name| exports.get(*name)) {
                return Some(child.clone());
            }
            return Some(m);
        }
    }
    None
}

/// The import graph: module -> the modules it uses (itself left out).
fn graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let codes: BTreeMap<&String, String> = files.iter().map(|(m, t)| (m, code(t))).collect();
    let modules: BTreeMap<String, BTreeMap<String, String>> = codes
        .iter()
        .map(|(m, c)| ((*m).clone(), reexports(m, c)))
        .collect();
    codes
        .iter()
        .map(|(m, c)| {
            let deps = references(m, c)
                .iter()
                .filter_map(|p| resolve(p, &modules))
                .filter(|d| d != *m)
                .collect();
            ((*m).clone(), deps)
        })
        .collect()
}

/// Every import from a module to a higher layer, as `from -> to`.
fn upward(graph: &BTreeMap<String, BTreeSet<String>>, layers: Layers) -> Vec<String> {
    graph
        .iter()
        .flat_map(|(m, deps)| {
            deps.iter()
                .filter(|d| rank(layers, d) > rank(layers, m))
                .map(move |d| format!("{m} -> {d}"))
        })
        .collect()
}

/// The import cycles: each strongly connected group of two or more modules (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.graph.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn project() -> BTreeMap<String, String> {
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn console() -> BTreeMap<String, String> {
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("console/src"))
}

#[test]
fn the_layers_import_only_downward() {
    let g = graph(&project());
    assert!(g.contains_key("queue::claim") && g.contains_key("host::store"));
    let up = upward(&g, MODULE);
    assert!(
        up.is_empty(),
        "imports into a higher layer:\n{}",
        up.join("\n")
    );
}

#[test]
fn no_modules_import_each_other_in_a_cycle() {
    let found = cycles(&graph(&project()));
    assert!(found.is_empty(), "import cycles: {found:?}");
}

#[test]
fn the_console_imports_one_way_with_no_cycle() {
    let g = graph(&console());
    assert!(g.contains_key("web::pages") && g.contains_key("overview"));
    let unplaced: Vec<&String> = g
        .keys()
        .filter(|m| rank(CONSOLE, m) == CONSOLE.len())
        .collect();
    assert!(
        unplaced.is_empty(),
        "console modules in no layer (add them to CONSOLE): {unplaced:?}"
    );
    let up = upward(&g, CONSOLE);
    assert!(
        up.is_empty(),
        "console imports into a higher layer:\n{}",
        up.join("\n")
    );
    let found = cycles(&g);
    assert!(found.is_empty(), "console import cycles: {found:?}");
}

#[test]
fn unsafe_code_lives_only_in_the_host_layer() {
    let files = project();
    let mut offenders = Vec::new();
    for (module, text) in &files {
        // The keyword, not the lint's name (`forbid(unsafe_code)`).
        let code = code(text);
        if rank(MODULE, module) != rank(MODULE, "host")
            && code.replace("unsafe_code", "").contains("unsafe")
        {
            offenders.push(module.clone());
        }
    }
    assert!(offenders.is_empty(), "unsafe outside host/: {offenders:?}");
    for layer in ["protocol", "queue", "runtime", "commands"] {
        assert!(
            files[layer].contains("#![forbid(unsafe_code)]"),
            "{layer}/mod.rs forbids unsafe code"
        );
    }
    assert!(files["lib"].contains("#![deny(unsafe_code)]"));
}

// ---- the checker itself ----

fn files(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect()
}

#[test]
fn the_checker_finds_an_upward_import_and_a_cycle() {
    let g = graph(&files(&[
        ("protocol", "pub mod a;\npub mod b;\npub use a::Thing;\n"),
        (
            "protocol::a",
            "use super::b::Other; // crate::commands::x in a comment\n",
        ),
        (
            "protocol::b",
            "use crate::protocol::Thing;\nfn f() { crate::host::x(); }\n",
        ),
        ("host", "pub mod y;\n"),
        (
            "host::y",
            "use crate::{protocol::{a::Thing as T, b}, queue};\n",
        ),
        ("queue", "fn g() -> &'static str { \"crate::commands\" }\n"),
        ("commands", ""),
    ]));
    assert_eq!(
        g["protocol::b"],
        ["host", "protocol::a"].map(String::from).into(),
        "a re-exported name resolves to its module; comments and strings are not code"
    );
    assert_eq!(
        g["host::y"],
        ["protocol::a", "protocol::b", "queue"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        upward(&g, MODULE),
        ["host::y -> queue", "protocol::b -> host"]
    );
    assert_eq!(cycles(&g), [["protocol::a", "protocol::b"]]);
    assert!(g["queue"].is_empty());
}
