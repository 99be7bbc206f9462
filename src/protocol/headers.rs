//! A job's headers (protocol.md §10): a small map a job carries from its producer to each of its
//! attempts, the W3C trace context (`traceparent`, `tracestate`, `baggage`) and user keys. The
//! row keeps them in one `headers` field, a line a header, `<key>:<value>`, in the order given.

use super::EmqError;

/// Most headers one job carries.
pub const MAX_HEADERS: usize = 32;
/// Longest key, in bytes.
pub const MAX_KEY_LEN: usize = 64;
/// Longest value, in bytes (a W3C `baggage` may be 8,192).
pub const MAX_VALUE_LEN: usize = 8192;
/// Most bytes the `headers` field holds: every line with its separators.
pub const MAX_BYTES: usize = 16384;

/// A key: 1 to [`MAX_KEY_LEN`] bytes, each a letter, a digit or one of ``!#$%&'*+-.^_`|~``
/// (an HTTP token's characters, so never the `:` that ends it).
pub fn valid_key(key: &[u8]) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len())
        && key
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A value: up to [`MAX_VALUE_LEN`] bytes with no line break in them.
pub fn valid_value(value: &[u8]) -> bool {
    value.len() <= MAX_VALUE_LEN && !value.iter().any(|&b| b == b'\n' || b == b'\r')
}

fn refusal(what: &str) -> EmqError {
    EmqError::Syntax(format!("syntax error: {what}").into())
}

/// The `headers` field for `pairs`, each checked: a key named twice, a key or value out of
/// bounds, or more than [`MAX_HEADERS`] or [`MAX_BYTES`] in all is a syntax error.
pub fn encode<'a>(
    pairs: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<Vec<u8>, EmqError> {
    if pairs.len() == 0 || pairs.len() > MAX_HEADERS {
        return Err(refusal(&format!("HEADERS takes 1 to {MAX_HEADERS} pairs")));
    }
    let mut out = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::with_capacity(pairs.len());
    for (key, value) in pairs {
        if !valid_key(key) {
            return Err(refusal(&format!(
                "a header key is 1 to {MAX_KEY_LEN} letters, digits or !#$%&'*+-.^_`|~"
            )));
        }
        if !valid_value(value) {
            return Err(refusal(&format!(
                "a header value is at most {MAX_VALUE_LEN} bytes, with no CR or LF"
            )));
        }
        if keys.contains(&key) {
            return Err(refusal("a header key is named twice"));
        }
        keys.push(key);
        if !out.is_empty() {
            out.push(b'\n');
        }
        out.extend_from_slice(key);
        out.push(b':');
        out.extend_from_slice(value);
        if out.len() > MAX_BYTES {
            return Err(refusal(&format!(
                "a job's headers hold at most {MAX_BYTES} bytes"
            )));
        }
    }
    Ok(out)
}

/// The headers a `headers` field holds, in order. A line with no key (a field written by hand)
/// is passed over.
pub fn decode(field: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    field.split(|&b| b == b'\n').filter_map(|line| {
        let at = line.iter().position(|&b| b == b':')?;
        let (key, value) = (&line[..at], &line[at + 1..]);
        (!key.is_empty()).then_some((key, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(pairs: &[(&str, &str)]) -> Result<Vec<u8>, EmqError> {
        encode(pairs.iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())))
    }

    #[test]
    fn headers_read_back_in_order() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let field = encoded(&[("traceparent", tp), ("tenant", "a:b"), ("empty", "")]).unwrap();
        assert_eq!(
            field,
            format!("traceparent:{tp}\ntenant:a:b\nempty:").into_bytes()
        );
        let back: Vec<_> = decode(&field).collect();
        assert_eq!(
            back,
            vec![
                (&b"traceparent"[..], tp.as_bytes()),
                (&b"tenant"[..], &b"a:b"[..]),
                (&b"empty"[..], &b""[..]),
            ]
        );
    }

    #[test]
    fn bad_headers_are_refused() {
        assert!(encoded(&[]).is_err(), "none");
        assert!(encoded(&[("a:b", "x")]).is_err(), "a colon in a key");
        assert!(encoded(&[("", "x")]).is_err(), "an empty key");
        assert!(encoded(&[("k", "x\ny")]).is_err(), "a line break");
        assert!(encoded(&[("k", "x\ry")]).is_err(), "a carriage return");
        assert!(encoded(&[("k", "1"), ("k", "2")]).is_err(), "twice");
        let long_key = "k".repeat(MAX_KEY_LEN + 1);
        assert!(encoded(&[(&long_key, "x")]).is_err());
        let value = "v".repeat(MAX_VALUE_LEN);
        assert!(encoded(&[("a", &value)]).is_ok());
        assert!(encoded(&[("a", &format!("{value}v"))]).is_err());
        assert!(
            encoded(&[("a", &value), ("b", &value)]).is_err(),
            "over the field's bytes"
        );
        let keys: Vec<String> = (0..=MAX_HEADERS).map(|i| format!("k{i}")).collect();
        let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        assert!(encoded(&pairs[..MAX_HEADERS]).is_ok());
        assert!(encoded(&pairs).is_err(), "too many");
    }

    #[test]
    fn lines_written_by_hand_without_a_key_are_passed_over() {
        let back: Vec<_> = decode(b"no colon\n:novalue\nk:v").collect();
        assert_eq!(back, vec![(&b"k"[..], &b"v"[..])]);
    }
}
