//! The pieces of Prometheus's text format the console writes: a family's `# HELP` and `# TYPE`
//! lines, and a label value escaped.

use std::fmt::Write;

/// A family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value as the text format escapes it: backslash, double quote and newline.
pub fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::label;

    #[test]
    fn a_label_value_escapes_backslash_quote_and_newline() {
        assert_eq!(label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(label("plain"), "plain");
    }
}
