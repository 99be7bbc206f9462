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
