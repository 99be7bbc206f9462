//! What an `emq` command can end in: the server's refusal or the connection's failure as the
//! client reports it, a terminal or socket that failed, or a request `emq` itself refuses.

/// An `emq` failure; each prints as the line a person reads.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the server or the connection to it, as it came.
    #[error("{}", shown(.0))]
    Emq(#[from] echomq_client::Error),
    /// The terminal (`emq top`) or the listening socket (`emq web`).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A request that cannot be made as given (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// A reply of a shape the protocol does not give.
    #[error("unexpected reply: {0}")]
    Reply(String),
}

/// A server's error reply as `valkey-cli` shows it, `CODE text`; anything else as the client
/// words it.
fn shown(e: &echomq_client::Error) -> String {
    match e {
        echomq_client::Error::Redis(r) => match (r.code(), r.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => r.to_string(),
        },
        other => other.to_string(),
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::Emq(echomq_client::Error::from_redis(e))
    }
}

pub type Result<T> = std::result::Result<T, Error>;
