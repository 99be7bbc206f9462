//! A job's headers (docs/observability.md): a small map that goes with the job to each of its
//! attempts, the W3C trace context among them, as an enqueue sends them and a claim returns
//! them.

use redis::Value;

/// `HEADERS <n> <key> <value> ...`, or nothing for no headers.
/// Most headers one job carries (the server's bound).
pub const MAX_HEADERS: usize = 32;

/// Refuses ([`crate::Error::Argument`]) more headers than [`MAX_HEADERS`], before anything is
/// sent.
pub(crate) fn check(headers: &[(String, String)]) -> crate::Result<()> {
    match headers.len() > MAX_HEADERS {
        true => Err(crate::Error::Argument(format!(
            "a job carries at most {MAX_HEADERS} headers, not {}",
            headers.len()
        ))),
        false => Ok(()),
    }
}

pub(crate) fn args(headers: &[(String, String)]) -> Vec<Vec<u8>> {
    if headers.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(2 + 2 * headers.len());
    out.push(b"HEADERS".to_vec());
    out.push(headers.len().to_string().into_bytes());
    for (key, value) in headers {
        out.push(key.clone().into_bytes());
        out.push(value.clone().into_bytes());
    }
    out
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
        let sent = args(&h);
        assert_eq!(sent[..2], [b"HEADERS".to_vec(), b"2".to_vec()]);
        let flat = Value::Array(
            sent[2..]
                .iter()
                .map(|b| Value::BulkString(b.clone()))
                .collect(),
        );
        assert_eq!(pairs_of(&flat), h);
        assert!(args(&[]).is_empty());
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
