//! The names the dashboard answers to. A request whose `Host` is none of them is refused (421),
//! so a DNS-rebinding page, whose requests carry its own name, reads nothing; a request that
//! changes something must also come from one of them (`Origin`, else `Referer`), or it is
//! refused (403).

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::App;
use crate::error::{Error, Result};

/// One allowed name: a host (lowercase, an IPv6 address in brackets) and its port, or any port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Name {
    host: String,
    port: Option<u16>,
}

/// Every name the dashboard is served as.
#[derive(Clone, Debug)]
pub struct Hosts(Vec<Name>);

impl Hosts {
    /// The listen address itself; on loopback also `localhost`, `127.0.0.1` and `[::1]` with its
    /// port; and each `--allow-host` name (`name` for any port, `name:port` for that one).
    pub fn new(listen: SocketAddr, allowed: &[String]) -> Result<Hosts> {
        let port = Some(listen.port());
        let ip = match listen {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        let mut names = vec![Name { host: ip, port }];
        if listen.ip().is_loopback() {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                names.push(Name {
                    host: host.into(),
                    port,
                });
            }
        }
        for given in allowed {
            let name = split(given).ok_or_else(|| {
                Error::Usage(format!(
                    "--allow-host takes a host name or address, with a port or without: {given:?}"
                ))
            })?;
            names.push(Name {
                host: name.0,
                port: name.1,
            });
        }
        Ok(Hosts(names))
    }

    /// Whether `authority` (`host[:port]`, as in `Host` or an origin; `default_port` when it
    /// names none) is one of the names.
    pub fn allows(&self, authority: &str, default_port: u16) -> bool {
        let Some((host, port)) = split(authority) else {
            return false;
        };
        let port = port.unwrap_or(default_port);
        self.0
            .iter()
            .any(|n| n.host == host && n.port.is_none_or(|p| p == port))
    }
}

/// `host[:port]` as (lowercase host, port); `None` when it is not one.
fn split(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim().to_ascii_lowercase();
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{inside}]"), port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.clone(), None),
        }
    };
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':');
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.is_empty() || !bare.chars().all(fine) || (bare.contains(':') && !host.starts_with('['))
    {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    Some((host, port))
}

/// `scheme://authority[/...]` (an `Origin` or a `Referer`) as its authority and the scheme's
/// port; `None` for anything else (`null`, another scheme).
fn origin_of(url: &str) -> Option<(&str, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // user:password@host is not an origin a browser sends.
    if authority.contains('@') {
        return None;
    }
    Some((authority, port))
}

fn refused(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_string(),
    )
        .into_response()
}

/// Refuses a request to a name the dashboard is not served as, and a change whose page was not
/// one of the dashboard's.
pub async fn guard(
    State(app): State<std::sync::Arc<App>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    if !host.is_some_and(|h| app.hosts.allows(&h, 80)) {
        return refused(
            StatusCode::MISDIRECTED_REQUEST,
            "this dashboard is not served under that Host name (emq web --allow-host NAME adds one)",
        );
    }
    let safe = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !safe {
        let from = headers
            .get(header::ORIGIN)
            .or_else(|| headers.get(header::REFERER))
            .and_then(|v| v.to_str().ok())
            .and_then(origin_of);
        if !from.is_some_and(|(authority, port)| app.hosts.allows(authority, port)) {
            return refused(
                StatusCode::FORBIDDEN,
                "a change must come from this dashboard's own pages (its Origin or Referer); nothing was changed",
            );
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, allowed: &[&str]) -> Hosts {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        Hosts::new(listen.parse().expect("addr"), &allowed).expect("hosts")
    }

    #[test]
    fn loopback_answers_to_its_names_with_its_port_only() {
        let h = hosts("127.0.0.1:8080", &[]);
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            assert!(h.allows(ok, 80), "{ok}");
        }
        for no in [
            "evil.example:8080",
            "localhost:8081",
            "localhost",
            "127.0.0.1",
            "",
            "localhost:80x",
            "127.0.0.1.evil.example:8080",
            "::1:8080",
        ] {
            assert!(!h.allows(no, 80), "{no}");
        }
        // Port 80 may go unsaid.
        assert!(hosts("127.0.0.1:80", &[]).allows("localhost", 80));
    }

    #[test]
    fn allow_host_adds_a_name_for_any_port_or_one() {
        let h = hosts(
            "10.0.0.5:8080",
            &["emq.example.com", "ops.example.com:9000"],
        );
        assert!(h.allows("10.0.0.5:8080", 80));
        assert!(!h.allows("localhost:8080", 80), "off loopback");
        assert!(h.allows("emq.example.com", 443));
        assert!(h.allows("Emq.Example.Com:8080", 80));
        assert!(h.allows("ops.example.com:9000", 80));
        assert!(!h.allows("ops.example.com", 443));
        assert!(Hosts::new("127.0.0.1:1".parse().expect("addr"), &["a/b".into()]).is_err());
        assert!(Hosts::new("127.0.0.1:1".parse().expect("addr"), &["".into()]).is_err());
    }

    #[test]
    fn an_origin_is_its_scheme_and_authority() {
        assert_eq!(
            origin_of("http://localhost:8080"),
            Some(("localhost:8080", 80))
        );
        assert_eq!(
            origin_of("https://emq.example.com/queues/x?set=dead"),
            Some(("emq.example.com", 443))
        );
        assert_eq!(origin_of("null"), None);
        assert_eq!(origin_of("file:///etc"), None);
        assert_eq!(origin_of("http://a@localhost:8080/"), None);
    }
}
