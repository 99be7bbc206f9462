//! What `make lint` holds the docs to: the README stays short, and every `protocol.md §N` that
//! code or docs cite is a section of docs/protocol.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const README_MAX_LINES: usize = 250;
/// Where citations may stand: the project's own sources and docs.
const CITING: [&str; 9] = [
    "src",
    "tests",
    "lua",
    "docs",
    "clients",
    "console",
    "chaos",
    "benches",
    "README.md",
];
/// How citations were spelled before docs/protocol.md (kept apart so this file does not match).
const OLD_CITATION: &str = concat!("SPEC", " §");
const CITED_EXTENSIONS: [&str; 6] = ["rs", "py", "md", "lua", "ts", "js"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn walk(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        let cited = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| CITED_EXTENSIONS.contains(&e));
        if cited {
            out.push(path.to_path_buf());
        }
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let p = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        walk(&p, out);
    }
}

/// The sections docs/protocol.md has: `§1`, `§1.1`, ... from its headings.
fn sections(protocol: &str) -> BTreeSet<String> {
    protocol
        .lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|w| w.starts_with('§'))
        .map(str::to_string)
        .collect()
}

/// Every section a text cites: `protocol.md §N`, and the `§M` that follow it in the same
/// run (`protocol.md §1.2, §6`).
fn citations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("protocol.md §") {
        let rest = &text[at + "protocol.md ".len()..];
        let run: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, '§' | '.' | ',' | ' ' | '-'))
            .collect();
        for part in run.split([',', ' ', '-']) {
            let part = part.trim_end_matches('.');
            if part.len() > "§".len() && part.starts_with('§') {
                found.push(part.to_string());
            }
        }
    }
    found
}

#[test]
fn the_readme_stays_within_its_length() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; it stays at {README_MAX_LINES} or fewer (figures and notes belong in docs/)"
    );
}

#[test]
fn every_protocol_citation_names_a_section_of_protocol_md() {
    let protocol =
        std::fs::read_to_string(root().join("docs/protocol.md")).expect("docs/protocol.md");
    let have = sections(&protocol);
    let mut files = Vec::new();
    for place in CITING {
        walk(&root().join(place), &mut files);
    }
    let mut wrong = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let name = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        if text.contains(OLD_CITATION) {
            wrong.push(format!(
                "{name}: cites `{OLD_CITATION}`, a document the repository does not hold"
            ));
        }
        for cited in citations(&text) {
            if !have.contains(&cited) {
                wrong.push(format!("{name}: cites protocol.md {cited}, which it lacks"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_citation_reader_finds_runs_and_the_section_reader_finds_headings() {
    assert_eq!(
        citations("the row (protocol.md §1.2, §6) and protocol.md §9."),
        ["§1.2", "§6", "§9"]
    );
    let have = sections("# T\n## §1 Keys\n### §1.1 Names\ntext §7\n");
    assert_eq!(have.into_iter().collect::<Vec<_>>(), ["§1", "§1.1"]);
}

/// Every source file under `dir` (relative to the root) whose name ends in `ext`, read.
fn sources(dir: &str, ext: &str) -> String {
    let mut files = Vec::new();
    walk(&root().join(dir), &mut files);
    files
        .iter()
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `name` is defined in `text`: as one of `forms`, each with `{}` for the name, or as
/// a line that starts with the name and one of `starts` (an enum's variant).
fn defines(text: &str, name: &str, forms: &[&str], starts: &[&str]) -> bool {
    forms.iter().any(|f| text.contains(&f.replace("{}", name)))
        || text.lines().any(|l| {
            let l = l.trim_start();
            l.strip_prefix(name)
                .is_some_and(|rest| starts.iter().any(|s| rest.starts_with(s)))
        })
}

/// The backticked names of one cell of docs/clients.md's table, each its last path segment
/// (`Queue.enqueue` -> `enqueue`, `Queue::enqueue_with` -> `enqueue_with`).
fn names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.rsplit([':', '.']).next().unwrap_or(n).to_string())
        .collect()
}

#[test]
fn every_name_the_clients_table_gives_is_defined_in_that_client() {
    let table = std::fs::read_to_string(root().join("docs/clients.md")).expect("docs/clients.md");
    let python = sources("clients/python/src", "py");
    let rust = sources("clients/rust/src", "rs");
    let node = std::fs::read_to_string(root().join("clients/node/index.d.ts")).expect("index.d.ts");
    let mut rows = 0;
    let mut missing = Vec::new();
    for line in table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| What"))
    {
        let cells: Vec<&str> = line.split(" | ").collect();
        assert_eq!(cells.len(), 4, "a row of four cells: {line}");
        rows += 1;
        for name in names(cells[1]) {
            let forms = ["def {}(", "class {}(", "class {}:", " {}: ", "({}: "];
            if !defines(&python, &name, &forms, &[]) {
                missing.push(format!("Python {name}"));
            }
        }
        for name in names(cells[2]) {
            let forms = [
                "fn {}(",
                "fn {}<",
                "struct {} ",
                "struct {}<",
                "enum {} ",
                "pub {}: ",
            ];
            if !defines(&rust, &name, &forms, &["(", " {", ","]) {
                missing.push(format!("Rust {name}"));
            }
        }
        for name in names(cells[3].trim_end_matches(" |")) {
            let forms = [
                "class {} ",
                "interface {} ",
                "type {} ",
                " {}(",
                " {}?:",
                " {}:",
                " {}<",
            ];
            if !defines(&node, &name, &forms, &[]) {
                missing.push(format!("Node {name}"));
            }
        }
    }
    assert!(rows >= 20, "the table has its rows ({rows})");
    assert!(
        missing.is_empty(),
        "docs/clients.md names what a client does not define: {missing:?}"
    );
}

#[test]
fn the_clients_table_check_finds_a_name_a_client_lacks() {
    let rust = "impl Queue {\n    pub async fn purge(&self) {}\n}\nenum Failure {\n    Retry(Duration),\n}";
    let forms = ["fn {}(", "pub {}: "];
    assert!(defines(rust, "purge", &forms, &["("]));
    assert!(defines(rust, "Retry", &forms, &["("]));
    assert!(!defines(rust, "requeue_dead", &forms, &["("]));
    assert_eq!(names("`Queue.flow`, `Flows::chain`"), ["flow", "chain"]);
}
