//! What `make lint` holds the code's shape to: no test file over 900 lines, and no file of the
//! module's `src/` over 600 lines of code (its inline test module left out) without a reason in
//! its header, a line starting `//! Over 600 lines:`.

use std::path::{Path, PathBuf};

const TEST_FILE_MAX_LINES: usize = 900;
const SOURCE_MAX_LINES: usize = 600;
const LONG_FILE_REASON: &str = "//! Over 600 lines:";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` whose name ends with one of `endings`.
fn files(dir: &Path, endings: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            files(&path, endings, out);
        } else if endings.iter().any(|e| name.ends_with(e)) {
            out.push(path);
        }
    }
}

/// Whether a path is a test file: under a `tests`/`test` folder, or a module's `tests.rs`.
fn is_test_file(path: &Path) -> bool {
    path.components()
        .any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "test")))
        || path.file_name().is_some_and(|n| n == "tests.rs")
}

/// A source's lines before its inline test module.
fn code_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_test_file_is_over_900_lines() {
    let mut all = Vec::new();
    for dir in [
        "tests", "src", "console", "clients", "chaos", "testing", "benches",
    ] {
        files(
            &root().join(dir),
            &[".rs", ".py", ".js", ".ts", ".mjs"],
            &mut all,
        );
    }
    let long: Vec<String> = all
        .iter()
        .filter(|p| is_test_file(p))
        .filter_map(|p| {
            let n = std::fs::read_to_string(p).ok()?.lines().count();
            (n > TEST_FILE_MAX_LINES).then(|| format!("{}: {n} lines", relative(p)))
        })
        .collect();
    assert!(
        long.is_empty(),
        "test files over {TEST_FILE_MAX_LINES} lines (split them by behaviour):\n{}",
        long.join("\n")
    );
}

#[test]
fn a_long_source_file_says_why_in_its_header() {
    let mut all = Vec::new();
    files(&root().join("src"), &[".rs"], &mut all);
    let unexplained: Vec<String> = all
        .iter()
        .filter(|p| !is_test_file(p))
        .filter_map(|p| {
            let text = std::fs::read_to_string(p).ok()?;
            let n = code_lines(&text);
            let header_says = text
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .any(|l| l.starts_with(LONG_FILE_REASON));
            (n > SOURCE_MAX_LINES && !header_says).then(|| format!("{}: {n} lines", relative(p)))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "src/ files over {SOURCE_MAX_LINES} lines of code whose header gives no reason \
         (`{LONG_FILE_REASON} ...`), or split them:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn the_readers_count_what_they_claim() {
    assert_eq!(code_lines("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert!(is_test_file(Path::new("src/queue/tests/limits.rs")));
    assert!(is_test_file(Path::new("src/queue/tests.rs")));
    assert!(!is_test_file(Path::new("src/queue/claim.rs")));
}
