//! The hand-written RESP pipeline: commands encoded before the clock starts, sent in windows,
//! and their replies framed off the socket without being parsed.

use std::io::{Read, Write};
use std::net::TcpStream;

/// Appends one RESP command.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The end of one complete reply at `pos`, and whether it is an error; `None` if incomplete.
fn reply_end(buf: &[u8], pos: usize) -> Option<(usize, bool)> {
    let line_end = pos + buf.get(pos..)?.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[pos + 1..line_end]).ok()?;
    let next = line_end + 2;
    match buf[pos] {
        b'+' | b':' => Some((next, false)),
        b'-' => Some((next, true)),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some((next, false));
            }
            let end = next + n as usize + 2;
            (end <= buf.len()).then_some((end, false))
        }
        b'*' => {
            let n: i64 = line.parse().ok()?;
            let mut at = next;
            let mut error = false;
            for _ in 0..n.max(0) {
                let (e, err) = reply_end(buf, at)?;
                at = e;
                error |= err;
            }
            Some((at, error))
        }
        _ => None,
    }
}

/// Reads exactly `replies` replies, appending each one's bytes to `keep` when given; panics
/// on an error reply.
pub fn read_replies(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    replies: usize,
    mut keep: Option<&mut Vec<Vec<u8>>>,
) {
    let mut seen = 0;
    let mut pos = 0;
    let mut chunk = [0u8; 65536];
    while seen < replies {
        while seen < replies {
            match reply_end(buf, pos) {
                Some((end, error)) => {
                    assert!(
                        !error,
                        "error reply: {}",
                        String::from_utf8_lossy(&buf[pos..end])
                    );
                    if let Some(kept) = keep.as_deref_mut() {
                        kept.push(buf[pos..end].to_vec());
                    }
                    pos = end;
                    seen += 1;
                }
                None => break,
            }
        }
        if seen < replies {
            let n = stream.read(&mut chunk).expect("read");
            assert!(n > 0, "server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    buf.drain(..pos);
}

/// One pipeline window: pre-encoded commands and how many replies they ask for.
pub type Window = (Vec<u8>, usize);

/// Sends each connection's windows in turn, waiting for each window's replies before the next;
/// keeps the replies when `keep`.
pub fn exchange(
    stream: &mut TcpStream,
    inbox: &mut Vec<u8>,
    windows: &[Window],
    keep: bool,
) -> Vec<Vec<u8>> {
    let mut kept = Vec::new();
    for (buf, replies) in windows {
        stream.write_all(buf).expect("write");
        read_replies(stream, inbox, *replies, keep.then_some(&mut kept));
    }
    kept
}

/// The header of the RESP element at `pos` (its type byte and number), moving past it.
pub fn header(buf: &[u8], pos: &mut usize) -> (u8, i64) {
    let end = *pos
        + buf[*pos..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a complete reply");
    let kind = buf[*pos];
    let n = std::str::from_utf8(&buf[*pos + 1..end])
        .ok()
        .and_then(|t| t.parse().ok())
        .expect("a number");
    *pos = end + 2;
    (kind, n)
}

/// The bulk string at `pos`, moving past it.
pub fn bulk<'a>(buf: &'a [u8], pos: &mut usize) -> &'a [u8] {
    let (kind, n) = header(buf, pos);
    assert_eq!(kind, b'$', "a bulk string");
    let text = &buf[*pos..*pos + n as usize];
    *pos += n as usize + 2;
    text
}
