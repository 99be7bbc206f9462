//! A parent's children as its handler (or a producer) reads them: `EMQ.CHILDREN` paged to the
//! end, each child's status and data by its queue and id.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;

/// Where a child is, as its parent sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChildStatus {
    /// Registered, not finished.
    Waiting,
    Acked,
    Dead,
    Cancelled,
}

/// A child's status and data: its result when acked, its error's text when dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildOutcome {
    pub status: ChildStatus,
    pub data: Vec<u8>,
}

/// A parent's children: `(queue, id)` -> outcome.
pub type Children = HashMap<(String, String), ChildOutcome>;

/// Pages `EMQ.CHILDREN` (`[<next-cursor>, [[<cq>, <cid>, <status>, <data>], ...]]`) through
/// `page(cursor)`, from cursor `0` until it answers `0` again.
pub(crate) async fn read_children<F, P>(mut page: P) -> Result<Children>
where
    P: FnMut(Vec<u8>) -> F,
    F: Future<Output = Result<Value>>,
{
    let mut children = Children::new();
    let mut cursor = b"0".to_vec();
    loop {
        let reply = page(cursor).await?;
        let shape = || Error::Reply(format!("{reply:?}"));
        // A child acked with no result may carry a null.
        type Row = (String, String, String, Option<Vec<u8>>);
        let (next, rows) =
            <(Vec<u8>, Vec<Row>)>::from_redis_value_ref(&reply).map_err(|_| shape())?;
        for (queue, id, status, data) in rows {
            let status = match status.as_str() {
                "waiting" => ChildStatus::Waiting,
                "acked" => ChildStatus::Acked,
                "dead" => ChildStatus::Dead,
                "cancelled" => ChildStatus::Cancelled,
                _ => return Err(shape()),
            };
            let data = data.unwrap_or_default();
            children.insert((queue, id), ChildOutcome { status, data });
        }
        if next == b"0" {
            return Ok(children);
        }
        cursor = next;
    }
}

/// A queue's children reader without its connection's type, for the job a handler gets.
pub(crate) trait ReadChildren: Send + Sync {
    fn children<'a>(
        &'a self,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Children>> + Send + 'a>>;
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> ReadChildren for Queue<C> {
    fn children<'a>(
        &'a self,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Children>> + Send + 'a>> {
        Box::pin(Queue::children(self, id))
    }
}

/// The reader a worker's jobs share.
#[derive(Clone)]
pub(crate) struct Reader(pub Arc<dyn ReadChildren>);

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reader")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(q: &str, id: &str, status: &str, data: &str) -> Value {
        Value::Array(
            [q, id, status, data]
                .iter()
                .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn page(cursor: &str, rows: Vec<Value>) -> Value {
        Value::Array(vec![
            Value::BulkString(cursor.as_bytes().to_vec()),
            Value::Array(rows),
        ])
    }

    #[tokio::test]
    async fn pages_are_read_to_the_end_into_one_map() {
        let mut pages = vec![
            page("0", vec![row("fetch", "JOB00000000002", "dead", "timeout")]),
            page("17", vec![row("fetch", "JOB00000000001", "acked", "42")]),
        ];
        let mut cursors = Vec::new();
        let children = read_children(|cursor| {
            cursors.push(String::from_utf8(cursor).unwrap());
            let reply = pages.pop().unwrap();
            async move { Ok(reply) }
        })
        .await
        .unwrap();
        assert_eq!(cursors, ["0", "17"]);
        let key = |id: &str| ("fetch".to_string(), id.to_string());
        assert_eq!(
            children[&key("JOB00000000001")],
            ChildOutcome {
                status: ChildStatus::Acked,
                data: b"42".to_vec()
            }
        );
        assert_eq!(children[&key("JOB00000000002")].status, ChildStatus::Dead);
    }

    #[tokio::test]
    async fn an_unknown_status_is_a_reply_error() {
        let reply = page("0", vec![row("q", "JOB00000000001", "lost", "")]);
        let read = read_children(|_| {
            let reply = reply.clone();
            async move { Ok(reply) }
        })
        .await;
        assert!(matches!(read, Err(Error::Reply(_))));
    }
}
