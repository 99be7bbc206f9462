//! A job's flow as the console shows it (docs/flows.md): the parents its row names, each with
//! its state; the parents that refused it at hand-over (`orphan`); and, for a parent, its
//! children from `EMQ.CHILDREN`, each with how it finished and its own state, read down a few
//! levels. Every job is read through the deployment by its own queue, so a flow spread over a
//! cluster's primaries reads whole; every read is bounded ([`Bounds`]), so a parent of 100,000
//! children costs a page, not the server's afternoon.

use std::future::Future;
use std::pin::Pin;

use redis::Value;
use serde::Serialize;

use crate::deployment::{page, Deployment};
use crate::error::{Error, Result};
use crate::overview::{self, cut, text};

/// How much of a flow is read.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Children shown under one parent; the rest are counted.
    pub children: usize,
    /// Levels of children read below the job (1: its children only).
    pub depth: usize,
    /// Jobs read in all (parents and children), beside the job itself.
    pub jobs: usize,
}

/// What `emq job` and the job page read.
pub const BOUNDS: Bounds = Bounds {
    children: 100,
    depth: 3,
    jobs: 300,
};

/// Bytes of a child's result or error shown.
pub const DATA: usize = 200;
/// Children one `EMQ.CHILDREN` page asks for (the server's limit is 1,000).
const PAGE: usize = 100;

/// A job named by a flow field: its queue and id.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobRef {
    pub queue: String,
    pub id: String,
}

/// A parent the job's `parents` field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Parent {
    pub queue: String,
    pub id: String,
    /// What the job's death or cancellation does to it: `fail` or `ignore`.
    pub policy: String,
    /// Its row's state (`waiting` until its children are done); `None` when it is gone or
    /// could not be read ([`Parent::error`]).
    pub state: Option<String>,
    /// Why it could not be read (a user who may not read its queue, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A parent's children, as far as they were read.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Children {
    /// The parent's `children`, `adopted` and `finished` counts (a count not in its row yet
    /// is 0).
    pub expected: i64,
    pub adopted: i64,
    pub finished: i64,
    pub shown: Vec<Child>,
    /// Children it has beyond those shown (the bounds left them out).
    pub more: u64,
    /// Why they could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One child, as its parent's row has it and as its own row is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Child {
    pub queue: String,
    pub id: String,
    /// How it finished, as its parent's row says: `waiting`, `acked`, `dead` or `cancelled`.
    pub status: String,
    /// Its result (acked) or error (dead), its first [`DATA`] bytes.
    pub data: String,
    /// Its own row's state; `None` when it is gone (or was not read, [`Child::read`]).
    pub state: Option<String>,
    /// Whether its own row was read (the bounds may leave it unread, or reading it failed:
    /// [`Child::error`]).
    pub read: bool,
    /// The parents that refused it at hand-over.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphan: Vec<JobRef>,
    /// Its own children, when it is a parent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<Children>,
    /// Why its row could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A job's place in its flows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Flow {
    pub parents: Vec<Parent>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub orphan: Vec<JobRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub children: Option<Children>,
}

impl Flow {
    /// Whether the job is in no flow: no parents, no refusals, no children.
    pub fn is_empty(&self) -> bool {
        self.parents.is_empty() && self.orphan.is_empty() && self.children.is_none()
    }
}

/// The row fields a flow is read from.
const FLOW_FIELDS: [&str; 7] = [
    "state", "set", "parents", "orphan", "children", "adopted", "finished",
];

/// The fields of a row read as bytes ([`overview::job_bytes`]) that [`flow`] reads, as text
/// (the payload and the rest left out).
pub fn flow_fields(raw: &[(String, Vec<u8>)]) -> Vec<(String, String)> {
    raw.iter()
        .filter(|(k, _)| FLOW_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}

/// The value of `name` among a row's fields.
fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn count(fields: &[(String, String)], name: &str) -> Option<i64> {
    field(fields, name).and_then(|v| v.trim().parse().ok())
}

/// A `parents` field's lines, `<queue> <id> <fail|ignore>`; a line of another form is skipped.
pub fn parents_of(value: &str) -> Vec<(JobRef, String)> {
    value
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (queue, id, policy) = (words.next()?, words.next()?, words.next()?);
            words.next().is_none().then(|| {
                let job = JobRef {
                    queue: queue.into(),
                    id: id.into(),
                };
                (job, policy.to_string())
            })
        })
        .collect()
}

/// An `orphan` field's lines, `<queue> <id>`.
pub fn orphans_of(value: &str) -> Vec<JobRef> {
    value
        .lines()
        .filter_map(|line| {
            let (queue, id) = line.split_once(' ')?;
            (!id.contains(' ')).then(|| JobRef {
                queue: queue.into(),
                id: id.into(),
            })
        })
        .collect()
}

/// The state a row's fields give: its `state`, else the set that holds it.
fn state_of(fields: &[(String, String)]) -> Option<String> {
    field(fields, "state")
        .or_else(|| field(fields, "set"))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The flow of the job in `queue` whose row is `fields` (as [`overview::job`] read it): its
/// parents with their states, its refusals, and its children down to `bounds`. A job or a page
/// of children that cannot be read (another user's queue, a failed node) is shown with its
/// error where it stands, so one unreadable job does not hide the rest.
pub async fn flow(
    dep: &Deployment,
    queue: &str,
    id: &str,
    fields: &[(String, String)],
    bounds: Bounds,
) -> Flow {
    let mut budget = bounds.jobs;
    let mut parents = Vec::new();
    for (job, policy) in parents_of(field(fields, "parents").unwrap_or_default()) {
        let (state, error) = if budget == 0 {
            (
                None,
                Some("not read: too many jobs in this flow".to_string()),
            )
        } else {
            budget -= 1;
            match overview::job(dep, &job.queue, &job.id).await {
                Ok(row) => (row.as_deref().and_then(state_of), None),
                Err(e) => (None, Some(e.to_string())),
            }
        };
        parents.push(Parent {
            queue: job.queue,
            id: job.id,
            policy,
            state,
            error,
        });
    }
    let orphan = orphans_of(field(fields, "orphan").unwrap_or_default());
    let children = match count(fields, "children") {
        None => None,
        Some(_) => Some(children(dep, queue, id, fields, 1, bounds, &mut budget).await),
    };
    Flow {
        parents,
        orphan,
        children,
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The children of the parent `queue`/`id` (whose row is `fields`), read at `level` (1 for the
/// job's own), each child's row read while `budget` lasts, and their children while `level`
/// is within the bounds.
fn children<'a>(
    dep: &'a Deployment,
    queue: &'a str,
    id: &'a str,
    fields: &'a [(String, String)],
    level: usize,
    bounds: Bounds,
    budget: &'a mut usize,
) -> Boxed<'a, Children> {
    Box::pin(async move {
        let mut out = Children {
            expected: count(fields, "children").unwrap_or(0),
            adopted: count(fields, "adopted").unwrap_or(0),
            finished: count(fields, "finished").unwrap_or(0),
            ..Children::default()
        };
        let adopted = u64::try_from(out.adopted).unwrap_or(0);
        if level > bounds.depth || *budget == 0 {
            out.more = adopted;
            return out;
        }
        let (listed, seen) = match listed(dep, queue, id, bounds.children.min(*budget)).await {
            Ok(l) => l,
            Err(e) => {
                out.error = Some(e.to_string());
                out.more = adopted;
                return out;
            }
        };
        for child in listed {
            *budget = budget.saturating_sub(1);
            out.shown
                .push(read_child(dep, child, level, bounds, budget).await);
        }
        out.more = adopted.max(seen).saturating_sub(out.shown.len() as u64);
        out
    })
}

/// Up to `limit` children of the parent from `EMQ.CHILDREN`, and how many it listed in all
/// before the reading stopped (a page may hold more than asked).
async fn listed(
    dep: &Deployment,
    queue: &str,
    id: &str,
    limit: usize,
) -> Result<(Vec<Child>, u64)> {
    let q = dep.queue(queue);
    let mut out = Vec::new();
    let mut seen = 0u64;
    let mut cursor = b"0".to_vec();
    loop {
        let args = [
            id.as_bytes().to_vec(),
            b"CURSOR".to_vec(),
            cursor,
            b"COUNT".to_vec(),
            PAGE.to_string().into_bytes(),
        ];
        let reply = q.call("EMQ.CHILDREN", &args).await?;
        let (next, _) = page(&reply)?;
        let Value::Array(parts) = &reply else {
            return Err(Error::Reply(format!("{reply:?}")));
        };
        if let Some(Value::Array(items)) = parts.get(1) {
            for item in items {
                let Value::Array(f) = item else { continue };
                let at = |i: usize| f.get(i).and_then(text).unwrap_or_default();
                seen += 1;
                if out.len() < limit {
                    let data = f.get(3).and_then(text).unwrap_or_default();
                    out.push(Child {
                        queue: at(0),
                        id: at(1),
                        status: at(2),
                        data: cut(data.as_bytes(), DATA).0,
                        state: None,
                        read: false,
                        orphan: Vec::new(),
                        children: None,
                        error: None,
                    });
                }
            }
        }
        if next == b"0" || out.len() >= limit {
            return Ok((out, seen));
        }
        cursor = next;
    }
}

/// `child` with its own row read: its state, its refusals, and its children when it is a
/// parent (one level further down).
async fn read_child(
    dep: &Deployment,
    mut child: Child,
    level: usize,
    bounds: Bounds,
    budget: &mut usize,
) -> Child {
    let row = match overview::job(dep, &child.queue, &child.id).await {
        Ok(row) => row,
        Err(e) => {
            child.error = Some(e.to_string());
            return child;
        }
    };
    child.read = true;
    let Some(fields) = row else { return child };
    child.state = state_of(&fields);
    child.orphan = orphans_of(field(&fields, "orphan").unwrap_or_default());
    if count(&fields, "children").is_some() {
        let below = children(
            dep,
            &child.queue,
            &child.id,
            &fields,
            level + 1,
            bounds,
            budget,
        )
        .await;
        child.children = Some(below);
    }
    child
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_and_orphans_read_their_lines_and_skip_others() {
        let parents = parents_of("albums JOB1 fail\nbooks JOB2 ignore\nhand written\n");
        assert_eq!(
            parents,
            vec![
                (
                    JobRef {
                        queue: "albums".into(),
                        id: "JOB1".into()
                    },
                    "fail".to_string()
                ),
                (
                    JobRef {
                        queue: "books".into(),
                        id: "JOB2".into()
                    },
                    "ignore".to_string()
                ),
            ]
        );
        assert_eq!(
            orphans_of("albums JOB1\nx y z"),
            vec![JobRef {
                queue: "albums".into(),
                id: "JOB1".into()
            }]
        );
        assert!(parents_of("").is_empty());
    }
}
