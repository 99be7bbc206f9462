//! A page of one set's jobs (`EMQ.JOBS`, docs/commands.md): each job's id, its score in the set
//! and its attempts, with its payload and last error when asked; a partitioned queue's walked
//! over its partitions (walk.rs).

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;

/// One job of a page of a set, as [`Queue::jobs`] lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// Its score in the set: 0 in `pending`; in the others the due time, lease deadline or time
    /// of death (unix ms). `None` for a score that is no whole number (one written by hand).
    pub score: Option<i64>,
    /// `None` where the row lacks it (a member whose row is gone).
    pub attempts: Option<u64>,
    /// With payloads asked, the payload (`None` where the row lacks it); `None` without.
    pub payload: Option<Vec<u8>>,
    /// With payloads asked, the last error (`None` for a job that never failed); `None` without.
    pub error: Option<String>,
}

impl Listed {
    /// One job of the page: `[id, score, attempts]`, then `payload` and `error` with payloads.
    fn from_reply(v: &Value) -> Result<Listed> {
        let malformed = || Error::Reply(format!("EMQ.JOBS: a job {v:?}"));
        let Value::Array(fields) = v else {
            return Err(malformed());
        };
        let field = |i: usize| fields.get(i).filter(|f| **f != Value::Nil);
        let id = field(0)
            .and_then(|f| String::from_redis_value_ref(f).ok())
            .ok_or_else(malformed)?;
        Ok(Listed {
            id,
            score: field(1).and_then(|f| i64::from_redis_value_ref(f).ok()),
            attempts: field(2).and_then(|f| u64::from_redis_value_ref(f).ok()),
            payload: field(3).and_then(|f| Vec::<u8>::from_redis_value_ref(f).ok()),
            error: field(4)
                .and_then(|f| Vec::<u8>::from_redis_value_ref(f).ok())
                .map(|e| String::from_utf8_lossy(&e).into_owned()),
        })
    }
}

/// `EMQ.JOBS`' `[<next-cursor>, [<job>, ...]]`.
fn jobs_page(reply: &Value) -> Result<(String, Vec<Listed>)> {
    let malformed = || Error::Reply(format!("{reply:?}"));
    let Value::Array(parts) = reply else {
        return Err(malformed());
    };
    let [cursor, Value::Array(found)] = parts.as_slice() else {
        return Err(malformed());
    };
    let cursor = String::from_redis_value_ref(cursor).map_err(|_| malformed())?;
    let jobs = found
        .iter()
        .map(Listed::from_reply)
        .collect::<Result<_>>()?;
    Ok((cursor, jobs))
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// One page of a set (`pending`, `active`, `scheduled`, `dead` or `waiting`; another is
    /// [`Error::Set`]) in the set's order (by score, then id), after `cursor` (`"0"`: from the
    /// start), up to `count` (1 to 1,000; the server's default: 100), with each job's payload
    /// and last error when `payloads`: the next cursor (`"0"` at the end) and the jobs. Pass
    /// the cursor back unchanged. A job that stays in the set at its score is listed once in a
    /// walk from `"0"` back to `"0"`. `pending` lists the default group's ready jobs, not a
    /// named group's (docs/groups.md).
    ///
    /// A partitioned queue's set is walked partition by partition, in the set's order within
    /// each: the cursor is `"<partition>:<cursor>"`, a page comes from one partition, and a
    /// page is empty only at the end (walk.rs).
    /// The width read, and a cursor refused, as [`Queue::listing`] has them.
    pub async fn jobs(
        &self,
        set: &str,
        cursor: &str,
        count: Option<u32>,
        payloads: bool,
    ) -> Result<(String, Vec<Listed>)> {
        self.listing(cursor, |queue, inner| async move {
            let mut args = vec![
                set.as_bytes().to_vec(),
                b"CURSOR".to_vec(),
                inner.into_bytes(),
            ];
            if let Some(n) = count {
                args.extend([b"COUNT".to_vec(), n.to_string().into_bytes()]);
            }
            if payloads {
                args.push(b"WITHPAYLOADS".to_vec());
            }
            jobs_page(&queue.call("EMQ.JOBS", &args).await?)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_page_reads_as_its_cursor_and_jobs() {
        let reply = Value::Array(vec![
            bulk("1798000030000:JOB0KHTOWnGLuC"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("JOB0KHTOWnGLuC"),
                    Value::Int(1_798_000_030_000),
                    Value::Int(2),
                    bulk("{\"sku\":42}"),
                    bulk("boom"),
                ]),
                // A member whose row is gone, its score written by hand.
                Value::Array(vec![bulk("JOB0KHTOWnGLuD"), bulk("1.5"), Value::Nil]),
            ]),
        ]);
        let (cursor, jobs) = jobs_page(&reply).unwrap();
        assert_eq!(cursor, "1798000030000:JOB0KHTOWnGLuC");
        assert_eq!(
            jobs,
            [
                Listed {
                    id: "JOB0KHTOWnGLuC".into(),
                    score: Some(1_798_000_030_000),
                    attempts: Some(2),
                    payload: Some(b"{\"sku\":42}".to_vec()),
                    error: Some("boom".into()),
                },
                Listed {
                    id: "JOB0KHTOWnGLuD".into(),
                    ..Listed::default()
                },
            ]
        );
        assert!(matches!(jobs_page(&Value::Int(0)), Err(Error::Reply(_))));
        let no_id = Value::Array(vec![bulk("0"), Value::Array(vec![Value::Array(vec![])])]);
        assert!(matches!(jobs_page(&no_id), Err(Error::Reply(_))));
    }
}
