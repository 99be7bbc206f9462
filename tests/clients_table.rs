//! What `make lint` holds docs/clients.md's table to: each name it gives a client is defined in
//! that client's source. A name given with its type (`Queue.purge`, `Queue::purge`) must be
//! defined on that type: in its class (or a Python base class), its `impl` or struct blocks, or
//! Node's declaration; a bare name (an option, a class) anywhere in the client.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy)]
enum Lang {
    Python,
    Rust,
    Node,
}

impl Lang {
    /// How a member (or a variant, a field) of a type is spelled where it is defined.
    fn forms(self) -> &'static [&'static str] {
        match self {
            Lang::Python => &["def {}(", "class {}(", "class {}:", " {}: ", "({}: "],
            Lang::Rust => &[
                "fn {}(",
                "fn {}<",
                "struct {} ",
                "struct {}<",
                "enum {} ",
                "pub {}: ",
            ],
            Lang::Node => &[
                "class {} ",
                "interface {} ",
                "type {} ",
                " {}(",
                " {}?:",
                " {}:",
                " {}<",
            ],
        }
    }

    /// What may follow a name that starts a line (an enum's variant).
    fn starts(self) -> &'static [&'static str] {
        match self {
            Lang::Rust => &["(", " {", ","],
            Lang::Python | Lang::Node => &[],
        }
    }

    /// The type a line at column 0 opens a block of, if it opens one.
    fn opens(self, line: &str) -> Option<String> {
        match self {
            Lang::Python => line.strip_prefix("class ").map(ident),
            Lang::Rust => rust_block(line),
            Lang::Node => [
                "export declare class ",
                "export class ",
                "export interface ",
            ]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .map(ident),
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The identifier `text` starts with.
fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The type a Rust line at column 0 opens: an `impl`'s (a trait's impl: the type after `for`),
/// a struct's or an enum's.
fn rust_block(line: &str) -> Option<String> {
    let line = line.strip_prefix("pub ").unwrap_or(line);
    if let Some(rest) = line
        .strip_prefix("struct ")
        .or_else(|| line.strip_prefix("enum "))
    {
        return Some(ident(rest));
    }
    let mut rest = line.strip_prefix("impl")?;
    if rest.starts_with('<') {
        // The impl's own generics, `->` inside them not closing one.
        let (mut depth, mut prev) = (0, ' ');
        for (i, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' if prev != '-' => depth -= 1,
                _ => {}
            }
            prev = c;
            if depth == 0 {
                rest = &rest[i + 1..];
                break;
            }
        }
    }
    let target = rest.rsplit(" for ").next().unwrap_or(rest).trim_start();
    Some(ident(target.rsplit("::").next().unwrap_or(target)))
}

/// The text of every block that defines `ty` in `source`, from its opening line at column 0 to
/// the next line at column 0 that closes it (`}`) or, in Python, starts something else; with
/// the blocks of a Python class's bases.
fn blocks(lang: Lang, source: &str, ty: &str, seen: &mut BTreeSet<String>) -> String {
    if !seen.insert(ty.to_string()) {
        return String::new();
    }
    let mut out = String::new();
    let mut bases = Vec::new();
    let mut inside = false;
    for line in source.lines() {
        let top = !line.is_empty() && !line.starts_with(char::is_whitespace);
        if inside && top {
            let closes = match lang {
                Lang::Python => !line.starts_with('#') && !line.starts_with(')'),
                Lang::Rust | Lang::Node => line.starts_with('}'),
            };
            if closes {
                inside = false;
                if !matches!(lang, Lang::Python) {
                    continue;
                }
            }
        }
        if !inside && top && lang.opens(line).as_deref() == Some(ty) {
            inside = true;
            if let (Lang::Python, Some((_, list))) = (lang, line.split_once('(')) {
                let list = list.split(')').next().unwrap_or("");
                bases.extend(list.split(',').map(|b| ident(b.trim())));
            }
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    for base in bases.iter().filter(|b| !b.is_empty()) {
        out.push_str(&blocks(lang, source, base, seen));
    }
    out
}

/// Whether `name` is defined in `text`, in one of `lang`'s forms or as a line that starts with
/// it (a variant).
fn defines(lang: Lang, text: &str, name: &str) -> bool {
    lang.forms()
        .iter()
        .any(|f| text.contains(&f.replace("{}", name)))
        || text.lines().any(|l| {
            l.trim_start()
                .strip_prefix(name)
                .is_some_and(|rest| lang.starts().iter().any(|s| rest.starts_with(s)))
        })
}

/// Whether the client whose source is `source` defines `entry`: `Type.name`, `Type::name` or a
/// bare `name`.
fn has(lang: Lang, source: &str, entry: &str) -> bool {
    let split = entry.rsplit_once("::").or_else(|| entry.rsplit_once('.'));
    match split {
        Some((ty, name)) => defines(lang, &blocks(lang, source, ty, &mut BTreeSet::new()), name),
        None => defines(lang, source, entry),
    }
}

/// The backticked names of one cell of the table.
fn entries(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

fn walk(path: &Path, ext: &str, out: &mut String) {
    if path.is_file() {
        if path.extension().and_then(|e| e.to_str()) == Some(ext) {
            out.push_str(&std::fs::read_to_string(path).unwrap_or_default());
            out.push('\n');
        }
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        walk(&p, ext, out);
    }
}

fn sources(dir: &str, ext: &str) -> String {
    let mut out = String::new();
    walk(&root().join(dir), ext, &mut out);
    out
}

#[test]
fn every_name_the_clients_table_gives_is_defined_in_that_client_on_its_type() {
    let table = std::fs::read_to_string(root().join("docs/clients.md")).expect("docs/clients.md");
    let clients = [
        (Lang::Python, "Python", sources("clients/python/src", "py")),
        (Lang::Rust, "Rust", sources("clients/rust/src", "rs")),
        (Lang::Node, "Node", sources("clients/node/index.d.ts", "ts")),
    ];
    let mut rows = 0;
    let mut missing = Vec::new();
    for line in table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| What"))
    {
        let cells: Vec<&str> = line.trim_end_matches(" |").split(" | ").collect();
        assert_eq!(cells.len(), 4, "a row of four cells: {line}");
        rows += 1;
        for ((lang, client, source), cell) in clients.iter().zip(&cells[1..]) {
            for entry in entries(cell) {
                if !has(*lang, source, entry) {
                    missing.push(format!("{client} {entry}"));
                }
            }
        }
    }
    assert!(rows >= 20, "the table has its rows ({rows})");
    assert!(
        missing.is_empty(),
        "docs/clients.md names what a client does not define there: {missing:?}"
    );
}

#[test]
fn a_name_defined_on_another_type_is_missing() {
    let rust = "impl<C: Fn() -> u8> Worker<C> {\n    pub fn purge(&self) {}\n}\n\
                impl<C> Read for Queue<C> {\n    fn children(&self) {}\n}\n\
                pub struct Enqueue {\n    pub delay: u64,\n}\npub enum Failure {\n    Retry(u64),\n}\n";
    assert!(has(Lang::Rust, rust, "Worker::purge"));
    assert!(!has(Lang::Rust, rust, "Queue::purge"));
    assert!(has(Lang::Rust, rust, "Queue::children"));
    assert!(has(Lang::Rust, rust, "Enqueue::delay"));
    assert!(!has(Lang::Rust, rust, "Worker::delay"));
    assert!(has(Lang::Rust, rust, "Retry"));

    let python = "class Settings:\n    def limit(self): ...\n\n\
                  class Queue(Settings):\n    def purge(self): ...\n\n\
                  class Worker:\n    def run(self): ...\n";
    assert!(has(Lang::Python, python, "Queue.limit"), "from its base");
    assert!(has(Lang::Python, python, "Queue.purge"));
    assert!(!has(Lang::Python, python, "Queue.run"));
    assert!(!has(Lang::Python, python, "Worker.purge"));

    let node = "export interface Stats {\n  pending: number;\n}\n\
                export declare class Queue {\n  purge(set: string): Promise<number>;\n}\n";
    assert!(has(Lang::Node, node, "Queue.purge"));
    assert!(!has(Lang::Node, node, "Queue.pending"));
    assert!(has(Lang::Node, node, "pending"));
    assert_eq!(
        entries("`Queue.flow`, `Flows::chain`"),
        ["Queue.flow", "Flows::chain"]
    );
}
