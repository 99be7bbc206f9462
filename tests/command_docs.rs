//! `COMMAND DOCS` and `COMMAND INFO` of every `EMQ.*` command answer byte for byte as the
//! checked-in copy, tests/data/command-docs.txt, says: the replies (RESP3) rendered one value a
//! line, commands in name order. After a deliberate change to a command's descriptor, rewrite
//! the copy with `ECHOMQ_BLESS=1 cargo test --test command_docs` and review its diff. The copy
//! names the server it was captured from; another server may answer otherwise (Redis 7.0 has no
//! module ACL categories), and a failure says which server answered.

use emq_harness as support;

use std::fmt::Write as _;
use std::path::PathBuf;

use redis::{cmd, Value};
use support::*;

/// The checked-in copy.
fn copy_path() -> PathBuf {
    repo_root().join("tests/data/command-docs.txt")
}

/// What the copy starts with: lines of `#`, not compared.
const HEADER: &str = "\
# COMMAND DOCS and COMMAND INFO of every EMQ.* command, rendered by tests/command_docs.rs
# (RESP3: a map's key and value, a list's items each on a line, nested values indented;
# \"bulk\", +simple). Rewrite with ECHOMQ_BLESS=1 cargo test --test command_docs.
";

/// A value that fits on one line, or `None` for a map, list or set with members.
fn scalar(v: &Value) -> Option<String> {
    Some(match v {
        Value::Nil => "(nil)".to_string(),
        Value::Int(n) => n.to_string(),
        Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Value::SimpleString(s) => format!("+{s}"),
        Value::Okay => "+OK".to_string(),
        Value::Double(d) => format!("(double) {d}"),
        Value::Boolean(b) => format!("(boolean) {b}"),
        Value::VerbatimString { text, .. } => format!("(verbatim) {text:?}"),
        // Empty, a set and an array say the same; servers differ in which they send (the
        // subcommands of `COMMAND INFO`: a set on Valkey 8.0, an array on 9.1).
        Value::Array(items) | Value::Set(items) if items.is_empty() => "[]".to_string(),
        Value::Map(pairs) if pairs.is_empty() => "{}".to_string(),
        Value::Array(_) | Value::Set(_) | Value::Map(_) => return None,
        other => format!("{other:?}"),
    })
}

/// `v` at `depth`, after `lead` (a map's key or a list's dash) on its first line.
fn render(v: &Value, depth: usize, lead: &str, out: &mut String) {
    let pad = "  ".repeat(depth);
    if let Some(s) = scalar(v) {
        let _ = writeln!(out, "{pad}{lead}{s}");
        return;
    }
    match v {
        Value::Map(pairs) => {
            let _ = writeln!(out, "{pad}{}", lead.trim_end());
            for (k, v) in pairs {
                let key = match k {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => scalar(other).unwrap_or_else(|| format!("{other:?}")),
                };
                render(v, depth + 1, &format!("{key}: "), out);
            }
        }
        Value::Array(items) | Value::Set(items) => {
            let kind = if matches!(v, Value::Set(_)) {
                "(set)"
            } else {
                ""
            };
            let _ = writeln!(out, "{pad}{}", format!("{lead}{kind}").trim_end());
            for item in items {
                render(item, depth + 1, "- ", out);
            }
        }
        _ => unreachable!("every other value is a scalar"),
    }
}

/// The server's name and version (`valkey 8.0.1`), which the copy's header records.
fn server_version(server: &Server) -> String {
    let mut con = server.conn();
    match info_field(&mut con, "server", "valkey_version") {
        Some(v) => format!("valkey {v}"),
        None => format!(
            "redis {}",
            info_field(&mut con, "server", "redis_version").unwrap_or_default()
        ),
    }
}

/// The live server's version, and its `COMMAND DOCS` and `COMMAND INFO` of each `EMQ.*`
/// command, rendered.
fn live() -> (String, String) {
    let server = Server::start(Options::default());
    let version = server_version(&server);
    let mut con = server.conn3();
    let mut names = emq_commands(&mut con);
    names.sort();
    assert!(
        names.len() > 20,
        "the module registers its commands: {names:?}"
    );
    let mut out = String::new();
    for name in &names {
        let _ = writeln!(out, "\n== {name}");
        for sub in ["DOCS", "INFO"] {
            let reply: Value = cmd("COMMAND")
                .arg(sub)
                .arg(name)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("COMMAND {sub} {name}: {e}"));
            render(&reply, 0, &format!("COMMAND {sub}: "), &mut out);
        }
    }
    (version, out)
}

/// The copy's text after its header.
fn body(copy: &str) -> &str {
    let mut rest = copy;
    while rest.starts_with('#') {
        rest = rest.split_once('\n').map_or("", |(_, r)| r);
    }
    rest
}

/// The lines that differ, `-` the copy's and `+` the server's, by a longest common subsequence;
/// each numbered as a line of a copy whose header is `skip` lines.
fn diff(want: &str, got: &str, skip: usize) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("{:>5} + {}", skip + j + 1, b[j]));
            j += 1;
        } else {
            out.push(format!("{:>5} - {}", skip + i + 1, a[i]));
            i += 1;
        }
    }
    out.truncate(80);
    out.join("\n")
}

#[test]
fn command_docs_and_info_answer_as_the_checked_in_copy() {
    let (version, got) = live();
    let captured = format!("# Captured from {version}.\n");
    if std::env::var_os("ECHOMQ_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(copy_path().parent().expect("tests/data")).expect("mkdir");
        std::fs::write(copy_path(), format!("{HEADER}{captured}{got}")).expect("write the copy");
    }
    let copy = std::fs::read_to_string(copy_path())
        .unwrap_or_else(|e| panic!("{}: {e}", copy_path().display()));
    let want = body(&copy);
    let skip = copy.lines().count().saturating_sub(want.lines().count());
    assert!(
        want == got,
        "COMMAND DOCS/INFO of {version} differ from {} ({}; by line: - the copy, + the \
         server):\n{}\nAfter a deliberate change: ECHOMQ_BLESS=1 cargo test --test command_docs",
        copy_path().display(),
        copy.lines()
            .find(|l| l.starts_with("# Captured"))
            .unwrap_or("# Captured from ?"),
        diff(want, &got, skip)
    );
}

#[test]
fn the_renderer_nests_and_the_diff_names_lines() {
    let v = Value::Map(vec![
        (
            Value::BulkString(b"summary".to_vec()),
            Value::BulkString(b"a \"job\"".to_vec()),
        ),
        (
            Value::BulkString(b"flags".to_vec()),
            Value::Set(vec![Value::SimpleString("optional".into())]),
        ),
        (Value::BulkString(b"args".to_vec()), Value::Array(vec![])),
        (
            Value::BulkString(b"list".to_vec()),
            Value::Array(vec![Value::Int(-4), Value::Nil]),
        ),
    ]);
    let mut out = String::new();
    render(&v, 0, "X: ", &mut out);
    assert_eq!(
        out,
        "X:\n  summary: \"a \\\"job\\\"\"\n  flags: (set)\n    - +optional\n  args: []\n  \
         list:\n    - -4\n    - (nil)\n"
    );
    assert_eq!(body("# a\n# b\n\n== x\n"), "\n== x\n");
    assert_eq!(diff("a\nb\nc\n", "a\nB\nc\n", 3), "    5 + B\n    5 - b");
}
