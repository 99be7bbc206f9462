//! A job's headers (docs/observability.md): a small map that goes with the job to each of its
//! attempts, the W3C trace context among them, as an enqueue sends them and a claim returns
//! them.

use redis::Value;

/// Most headers one job carries (the server's bound).
pub const MAX_HEADERS: usize = 32;
/// Longest key, in bytes (the server's bound).
pub const MAX_KEY_LEN: usize = 64;
/// Longest value, in bytes (the server's bound).
pub const MAX_VALUE_LEN: usize = 8192;
/// Most bytes a job's headers take in its row, a `<key>:<value>` line each (the server's bound).
pub const MAX_BYTES: usize = 16384;

/// Refuses ([`crate::Error::Argument`]) headers the server would refuse, before anything is
/// sent: more than [`MAX_HEADERS`], a key that is not 1 to [`MAX_KEY_LEN`] letters, digits or
/// ``!#$%&'*+-.^_`|~``, a value over [`MAX_VALUE_LEN`] bytes or with a line break, a key named
/// twice, or more than [`MAX_BYTES`] in all.
fn check(headers: &[(String, String)]) -> crate::Result<()> {
    let refused = |why: String| Err(crate::Error::Argument(why));
    if headers.len() > MAX_HEADERS {
        return refused(format!(
            "a job carries at most {MAX_HEADERS} headers, not {}",
            headers.len()
        ));
    }
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let mut bytes = 0;
    for (i, (key, value)) in headers.iter().enumerate() {
        if !(1..=MAX_KEY_LEN).contains(&key.len()) || !key.bytes().all(token) {
            return refused(format!(
                "a header key is 1 to {MAX_KEY_LEN} letters, digits or !#$%&'*+-.^_`|~, not {key:?}"
            ));
        }
        if value.len() > MAX_VALUE_LEN || value.contains(['\r', '\n']) {
            return refused(format!(
                "header {key}'s value is at most {MAX_VALUE_LEN} bytes, with no CR or LF"
            ));
        }
        if headers[..i].iter().any(|(k, _)| k == key) {
            return refused(format!("the header {key} is given twice"));
        }
        bytes += usize::from(i > 0) + key.len() + 1 + value.len();
    }
    if bytes > MAX_BYTES {
        return refused(format!("a job's headers take at most {MAX_BYTES} bytes"));
    }
    Ok(())
}

/// `HEADERS <n> <key> <value> ...`, or nothing for no headers; checked first.
pub(crate) fn args(headers: &[(String, String)]) -> crate::Result<Vec<Vec<u8>>> {
    check(headers)?;
    if headers.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(2 + 2 * headers.len());
    out.push(b"HEADERS".to_vec());
    out.push(headers.len().to_string().into_bytes());
    for (key, value) in headers {
        out.push(key.clone().into_bytes());
        out.push(value.clone().into_bytes());
    }
    Ok(out)
}

/// The headers a claim or `EMQ.JOB` replies (a flat array under RESP2, a map under RESP3), in
/// order, as text.
pub(crate) fn pairs_of(reply: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => String::new(),
    };
    match reply {
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), text(v))).collect(),
        Value::Array(flat) => flat
            .chunks_exact(2)
            .map(|p| (text(&p[0]), text(&p[1])))
            .collect(),
        _ => Vec::new(),
    }
}

/// `given` over `base`: each key of `base` not in `given`, then `given` (the caller's win).
pub(crate) fn merged(
    base: Vec<(String, String)>,
    given: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = base
        .into_iter()
        .filter(|(k, _)| !given.iter().any(|(g, _)| g == k))
        .collect();
    out.extend(given);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_go_out_and_come_back_in_order() {
        let h = vec![
            ("traceparent".to_string(), "00-ab".to_string()),
            ("k".into(), "v".into()),
        ];
        let sent = args(&h).expect("args");
        assert_eq!(sent[..2], [b"HEADERS".to_vec(), b"2".to_vec()]);
        let flat = Value::Array(
            sent[2..]
                .iter()
                .map(|b| Value::BulkString(b.clone()))
                .collect(),
        );
        assert_eq!(pairs_of(&flat), h);
        assert!(args(&[]).expect("none").is_empty());
    }

    #[cfg(feature = "otel")]
    #[test]
    fn the_caller_s_headers_win() {
        let base = vec![
            ("traceparent".to_string(), "hook".to_string()),
            ("a".into(), "1".into()),
        ];
        let given = vec![("traceparent".to_string(), "mine".to_string())];
        assert_eq!(
            merged(base, given),
            vec![
                ("a".to_string(), "1".to_string()),
                ("traceparent".into(), "mine".into())
            ]
        );
    }
}
