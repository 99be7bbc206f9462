//! A queue's repeating schedules (`EMQ.CRON`, `EMQ.UNCRON`, `EMQ.CRONS`; docs/commands.md,
//! "Repeating jobs"): at each firing the server enqueues the schedule's payload as a new job. A
//! partitioned queue's schedule is kept by the partition its name routes to, and fires there.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::enqueue::REROUTES;
use crate::error::{Error, Result};
use crate::limit::Fields;
use crate::queue::{duration_ms, Queue};

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// A cron expression, in UTC: five fields, or six with a leading seconds field, or a
    /// nickname (`@hourly`, `@daily`, ...).
    Spec(String),
    /// Every so long (10 ms to a year, sent in whole ms; a positive one under half a ms is
    /// refused before anything is sent, [`Error::Argument`]), on the grid of its first firing.
    Every(Duration),
}

/// One repeating schedule, as [`Queue::crons`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub name: String,
    pub when: When,
    pub priority: i64,
    /// Its next firing (unix ms).
    pub next_ms: Option<u64>,
    /// Its last firing (unix ms); `None` before the first.
    pub last_ms: Option<u64>,
    /// What each firing enqueues.
    pub payload: Vec<u8>,
}

impl Schedule {
    /// One schedule of `EMQ.CRONS`: a map of `name`, `spec` or `every`, `priority`, `next`,
    /// `last` and `payload`.
    fn from_reply(reply: &Value) -> Result<Schedule> {
        let fields = Fields::of(reply)?;
        let when = match (fields.read::<String>("spec")?, fields.int("every")?) {
            (Some(spec), _) => When::Spec(spec),
            (None, Some(ms)) => When::Every(Duration::from_millis(ms)),
            (None, None) => return Err(Error::Reply(format!("EMQ.CRONS: {reply:?}"))),
        };
        Ok(Schedule {
            name: fields.text("name")?,
            when,
            priority: fields.read("priority")?.unwrap_or(0),
            next_ms: fields.int("next")?,
            last_ms: fields.int("last")?,
            payload: fields.read("payload")?.unwrap_or_default(),
        })
    }
}

/// `EMQ.CRONS`' schedules.
fn schedules(reply: &Value) -> Result<Vec<Schedule>> {
    let Value::Array(found) = reply else {
        return Err(Error::Reply(format!("EMQ.CRONS: {reply:?}")));
    };
    found.iter().map(Schedule::from_reply).collect()
}

/// Sorts `all` by name, byte by byte, as the server sorts a queue's (`String`'s order is its
/// bytes' order).
fn by_name(all: &mut [Schedule]) {
    all.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// Sets (or replaces) the schedule `name` (1 to 256 bytes): at each firing of `when` the
    /// server enqueues `payload` to the queue as a new job, with a minted id and `priority`
    /// (0 when `None`); its next firing (unix ms). A malformed spec, or one that never fires,
    /// is [`Error::Cron`]. Setting a name again replaces its spec, payload and priority.
    ///
    /// A partitioned queue's schedule goes to the partition `route(n, name)` (the width asked
    /// first when this handle has not learned it), which keeps it and fires into itself with
    /// ids minted to route there; a refusal with a width (`EMQSPANNED`: the queue spanned, or
    /// spanned again, since the width was learned) teaches it, and the schedule is sent again
    /// where its name routes then, up to [`REROUTES`] times. A width held from before the queue
    /// was unspanned and spanned again over another takes both: the retired partition it
    /// routes to answers width 0 (the queue's own name), and the queue's own name its width.
    /// A user not allowed `EMQ.WIDTH` (or a server without it) reads width 0: an ordinary
    /// queue.
    pub async fn cron(
        &self,
        name: &str,
        when: When,
        payload: impl AsRef<[u8]>,
        priority: Option<i64>,
    ) -> Result<u64> {
        let mut args = vec![name.as_bytes().to_vec()];
        match when {
            When::Spec(spec) => args.push(spec.into_bytes()),
            When::Every(d) => {
                let ms = duration_ms(d, "a period")?;
                args.extend([b"EVERY".to_vec(), ms.to_string().into_bytes()]);
            }
        }
        args.push(payload.as_ref().to_vec());
        if let Some(p) = priority {
            args.extend([b"PRIORITY".to_vec(), p.to_string().into_bytes()]);
        }
        self.resolved_width().await?;
        let mut reroutes = 0;
        loop {
            match self.placed(name).call("EMQ.CRON", &args).await {
                Err(Error::Spanned { width, .. }) if reroutes < REROUTES && self.relearn(width) => {
                    reroutes += 1;
                }
                reply => {
                    let reply = reply?;
                    return u64::from_redis_value_ref(&reply)
                        .map_err(|_| Error::Reply(format!("EMQ.CRON: {reply:?}")));
                }
            }
        }
    }

    /// Removes the schedule `name`; whether there was one. A partitioned queue's, from the
    /// partition its name routes to, by the width read afresh (`EMQ.WIDTH`; a retired
    /// partition answers no refusal here, so a width held from before a span, or from before
    /// the queue was spanned again, would find nothing), or the width a handle was given
    /// ([`Queue::knowing_width`]). A user not allowed `EMQ.WIDTH` reads width 0.
    pub async fn uncron(&self, name: &str) -> Result<bool> {
        self.current_width().await?;
        let args = [name.as_bytes().to_vec()];
        Ok(self.placed(name).call("EMQ.UNCRON", &args).await? == Value::Int(1))
    }

    /// Every schedule of the queue, by name (`EMQ.CRONS`), the names in byte order as the
    /// server sorts them. A partitioned queue's are its partitions', by the width read afresh
    /// (`EMQ.WIDTH`), or the width a handle was given ([`Queue::knowing_width`]), read one
    /// after the other and sorted by name. A user not allowed `EMQ.WIDTH` reads width 0.
    pub async fn crons(&self) -> Result<Vec<Schedule>> {
        self.current_width().await?;
        let mut all = Vec::new();
        for part in self.parts()? {
            all.extend(schedules(&self.at(part).call("EMQ.CRONS", &[]).await?)?);
        }
        by_name(&mut all);
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_listing_reads_each_schedule_s_spec_or_period() {
        let nightly = Value::Map(vec![
            (bulk("name"), bulk("nightly")),
            (bulk("spec"), bulk("0 3 * * *")),
            (bulk("every"), Value::Nil),
            (bulk("priority"), Value::Int(-1)),
            (bulk("next"), Value::Int(1_796_180_400_000)),
            (bulk("last"), Value::Nil),
            (bulk("payload"), bulk("{\"report\":\"daily\"}")),
        ]);
        // RESP2: a flat array.
        let heartbeat = Value::Array(vec![
            bulk("name"),
            bulk("heartbeat"),
            bulk("spec"),
            Value::Nil,
            bulk("every"),
            Value::Int(60_000),
            bulk("priority"),
            Value::Int(0),
            bulk("next"),
            Value::Int(1_796_143_060_000),
            bulk("last"),
            Value::Int(1_796_143_000_000),
            bulk("payload"),
            bulk("ping"),
        ]);
        let listed = schedules(&Value::Array(vec![nightly, heartbeat])).unwrap();
        assert_eq!(
            listed,
            [
                Schedule {
                    name: "nightly".into(),
                    when: When::Spec("0 3 * * *".into()),
                    priority: -1,
                    next_ms: Some(1_796_180_400_000),
                    last_ms: None,
                    payload: b"{\"report\":\"daily\"}".to_vec(),
                },
                Schedule {
                    name: "heartbeat".into(),
                    when: When::Every(Duration::from_secs(60)),
                    priority: 0,
                    next_ms: Some(1_796_143_060_000),
                    last_ms: Some(1_796_143_000_000),
                    payload: b"ping".to_vec(),
                },
            ]
        );
        assert!(matches!(schedules(&Value::Int(1)), Err(Error::Reply(_))));
    }

    #[test]
    fn schedules_are_sorted_by_their_names_bytes() {
        let named = |name: &str| Schedule {
            name: name.into(),
            when: When::Every(Duration::from_secs(60)),
            priority: 0,
            next_ms: None,
            last_ms: None,
            payload: Vec::new(),
        };
        let mut all: Vec<Schedule> = ["é", "b", "a10", "Z", "a9", "a", "~"]
            .into_iter()
            .map(named)
            .collect();
        by_name(&mut all);
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        // Upper case before lower, "a10" before "a9", a multibyte name (0xC3 ...) after "~".
        assert_eq!(names, ["Z", "a", "a10", "a9", "b", "~", "é"]);
        let mut by_string = names.clone();
        by_string.sort();
        assert_eq!(by_string, names, "String's order is its bytes'");
    }
}
