//! What `emq` prints to a terminal, made inert: a payload, an error, a queue name or any other
//! text from the server has its control characters (C0, ESC among them, DEL and C1) shown as
//! escapes, so none of it can move the cursor, clear the screen or retitle the window.

use std::borrow::Cow;

/// Whether a terminal would act on `c` instead of showing it.
fn control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// `text` with every control character escaped: `\n`, `\r`, `\t`, `\e` (ESC) and `\xNN` for
/// the rest of C0 and DEL, `\u{NN}` for C1. Text without one comes back as it was.
pub fn terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{1b}' => out.push_str("\\e"),
            c if (c as u32) < 0x80 && control(c) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if control(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A JSON document as `serde_json` wrote it (C0 already `\u00NN`), with DEL and C1 also
/// written as `\u00NN`: still the same JSON, and inert on a terminal.
pub fn json(document: &str) -> Cow<'_, str> {
    if !document.chars().any(control) {
        return Cow::Borrowed(document);
    }
    let mut out = String::with_capacity(document.len() + 8);
    for c in document.chars() {
        if control(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(terminal("plain ünïcode"), "plain ünïcode");
        assert!(matches!(terminal("plain"), Cow::Borrowed(_)));
        assert_eq!(terminal("\u{1b}[2Jgone"), "\\e[2Jgone");
        assert_eq!(terminal("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(terminal("\u{0}\u{7}\u{7f}"), "\\x00\\x07\\x7f");
        assert_eq!(terminal("\u{9b}2J\u{85}"), "\\u{9b}2J\\u{85}");
    }

    #[test]
    fn json_stays_json() {
        let doc = serde_json::json!({ "p": "\u{1b}[2J\u{9b}\u{7f}" }).to_string();
        let shown = json(&doc);
        assert!(!shown.chars().any(control), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).expect("json");
        assert_eq!(back["p"], "\u{1b}[2J\u{9b}\u{7f}");
    }
}
