//! The reference pages against a real server: every command in docs/commands.md and every
//! setting and `INFO emq` field in docs/configuration.md exists with the documented flags,
//! options, default and range, and nothing the module registers is left out.

use emq_harness as support;

use std::collections::BTreeSet;

use redis::{cmd, Value};
use support::*;

/// The lines of the section headed `## <title>` in `docs/<page>`, up to the next `## ` heading.
fn section(page: &str, title: &str) -> Vec<String> {
    let path = repo_root().join("docs").join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let heading = format!("## {title}");
    assert!(
        text.lines().any(|l| l == heading),
        "docs/{page} has no section {heading:?}"
    );
    text.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .map(str::to_string)
        .collect()
}

/// The cells of a Markdown table row, trimmed, without the outer pipes. A `\|` inside a cell
/// (as in `DELAY <ms> \| AT <unix-ms>`) does not split it.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().expect("a cell").push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().expect("a cell").push(c),
        }
    }
    out.iter().map(|c| c.trim().to_string()).collect()
}

/// The backticked words of a text, in order.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_command_table_lists_every_command_with_its_flags() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let rows: Vec<Vec<String>> = section("commands.md", "Commands")
        .iter()
        .filter(|l| l.starts_with("| `EMQ."))
        .map(|l| cells(l))
        .collect();
    let documented: BTreeSet<String> = rows
        .iter()
        .map(|r| {
            let usage = code_spans(&r[0]).remove(0);
            usage.split(' ').next().expect("a name").to_lowercase()
        })
        .collect();
    let registered: BTreeSet<String> = emq_commands(&mut con).into_iter().collect();
    assert_eq!(documented, registered, "commands.md vs the server");
    assert_eq!(rows.len(), registered.len(), "one row per command");

    for row in &rows {
        let usage = code_spans(&row[0]).remove(0);
        let name = usage.split(' ').next().expect("a name").to_lowercase();
        let flags_cell = row.last().expect("a flags cell");
        let documented: BTreeSet<String> = code_spans(flags_cell)
            .remove(0)
            .split(' ')
            .map(|f| f.replace("deny-oom", "denyoom"))
            .collect();
        let info: Vec<Value> = cmd("COMMAND")
            .arg("INFO")
            .arg(&name)
            .query(&mut con)
            .expect("COMMAND INFO");
        let Some(Value::Array(fields)) = info.first() else {
            panic!("{name}: {info:?}")
        };
        let Some(Value::Array(flags)) = fields.get(2) else {
            panic!("{name} flags: {fields:?}")
        };
        let actual: BTreeSet<String> = flags
            .iter()
            .filter_map(|f| match f {
                Value::SimpleString(s) if s != "module" => Some(s.clone()),
                Value::SimpleString(_) => None,
                other => panic!("{name} flag: {other:?}"),
            })
            .collect();
        assert_eq!(documented, actual, "{name}: flags vs COMMAND INFO");
        // The usage's options are the ones COMMAND DOCS gives the command.
        let docs: Value = cmd("COMMAND")
            .arg("DOCS")
            .arg(&name)
            .query(&mut con)
            .expect("COMMAND DOCS");
        let docs = format!("{docs:?}");
        for token in usage.split([' ', '[', ']', '|']) {
            let is_option =
                token.len() > 1 && token.chars().all(|c| c.is_ascii_uppercase() || c == '-');
            if is_option && !token.starts_with("EMQ") {
                assert!(
                    docs.contains(&format!("\"{token}\"")),
                    "{name} documents {token}: {docs}"
                );
            }
        }
    }
}

#[test]
fn the_configuration_table_gives_each_settings_default_and_range() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let rows: Vec<Vec<String>> = section("configuration.md", "Settings")
        .iter()
        .filter(|l| l.starts_with("| `emq."))
        .map(|l| cells(l))
        .collect();
    let live: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("emq.*")
        .query(&mut con)
        .expect("CONFIG GET");
    let live: BTreeSet<String> = live.chunks(2).map(|kv| kv[0].clone()).collect();
    let documented: BTreeSet<String> = rows.iter().map(|r| code_spans(&r[0]).remove(0)).collect();
    assert_eq!(documented, live, "configuration.md vs CONFIG GET emq.*");

    let set = |con: &mut redis::Connection, name: &str, value: i64| -> Result<(), String> {
        cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query::<()>(con)
            .map_err(|e| error_text(&e))
    };
    for row in &rows {
        let name = code_spans(&row[0]).remove(0);
        let value: Vec<String> = cmd("CONFIG")
            .arg("GET")
            .arg(&name)
            .query(&mut con)
            .expect("CONFIG GET");
        // A yes/no setting read at load only (the foreign_writes suite sets it).
        if row[2] == "yes / no" {
            assert_eq!(value[1], row[1], "{name}: default");
            continue;
        }
        let default: i64 = row[1].parse().expect("a numeric default");
        assert_eq!(value[1], default.to_string(), "{name}: default");
        let (low, high) = row[2].split_once('–').expect("a range 'low – high'");
        let low: i64 = low.trim().parse().expect("low");
        let high: i64 = high.trim().parse().expect("high");
        assert!(
            set(&mut con, &name, low - 1).is_err(),
            "{name} refuses {}",
            low - 1
        );
        assert!(
            set(&mut con, &name, high + 1).is_err(),
            "{name} refuses {}",
            high + 1
        );
        set(&mut con, &name, high).unwrap_or_else(|e| panic!("{name} takes {high}: {e}"));
        set(&mut con, &name, low).unwrap_or_else(|e| panic!("{name} takes {low}: {e}"));
        set(&mut con, &name, default).expect("back to the default");
    }
}

#[test]
fn the_info_section_names_every_info_field() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let text = section("configuration.md", "INFO emq").join("\n");
    let mut documented: BTreeSet<String> = code_spans(&text)
        .into_iter()
        .filter(|w| w.starts_with("emq_") && !w.contains('<'))
        .collect();
    // "one `emq_refused_<reason>` counter per refusal reason (`queue`, `type`, ...)".
    let reasons = text
        .split_once("emq_refused_<reason>")
        .and_then(|(_, rest)| rest.split_once('('))
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(list, _)| list)
        .expect("the list of refusal reasons");
    documented.extend(
        code_spans(reasons)
            .iter()
            .map(|r| format!("emq_refused_{r}")),
    );
    let info: String = cmd("INFO").arg("emq").query(&mut con).expect("INFO emq");
    let live: BTreeSet<String> = info
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, _)| k.to_string())
        .collect();
    assert_eq!(documented, live, "configuration.md vs INFO emq");
}
