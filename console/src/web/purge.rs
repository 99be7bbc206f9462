//! Purge in two steps. The confirmation page notes the ids of the set's jobs as they are then
//! (at most [`PURGE_MAX`], in the set's order) under a one-use ticket; the purge itself, once the
//! queue's name is typed, deletes those jobs and no other: a job enqueued, scheduled or killed
//! after the page was made stays.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;

use super::{back_to, checked, pages, App, Page, WebError};
use crate::deployment::Deployment;
use crate::error::Result;
use crate::overview::{self, int, PURGEABLE};

/// Jobs one confirmation covers at most; a larger set is purged a confirmation at a time.
pub const PURGE_MAX: usize = 10_000;
/// Confirmations open at once; opening one more forgets the oldest.
const OPEN_MAX: usize = 16;
/// Ids one `EMQ.JOBS` page reads while noting a set.
const NOTE_PAGE: usize = 1_000;

struct Ticket {
    id: String,
    queue: String,
    set: String,
    jobs: Vec<String>,
}

/// The open confirmations, newest last.
#[derive(Default)]
pub struct Tickets(Mutex<VecDeque<Ticket>>);

impl Tickets {
    fn open(&self, queue: &str, set: &str, jobs: Vec<String>) -> String {
        let id = format!("{:032x}", rand::random::<u128>());
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        open.push_back(Ticket {
            id: id.clone(),
            queue: queue.into(),
            set: set.into(),
            jobs,
        });
        while open.len() > OPEN_MAX {
            open.pop_front();
        }
        id
    }

    /// The jobs a confirmation noted, once: it is closed by this.
    fn take(&self, id: &str, queue: &str, set: &str) -> Option<Vec<String>> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = open
            .iter()
            .position(|t| t.id == id && t.queue == queue && t.set == set)?;
        open.remove(at).map(|t| t.jobs)
    }
}

fn purgeable(set: &str) -> std::result::Result<(), WebError> {
    if PURGEABLE.contains(&set) {
        return Ok(());
    }
    Err(WebError(
        StatusCode::BAD_REQUEST,
        format!("only pending, scheduled or dead jobs can be purged, not {set:?}"),
    ))
}

/// The ids of the set's jobs now, in the set's order, at most [`PURGE_MAX`].
async fn note(dep: &Deployment, queue: &str, set: &str) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let want = NOTE_PAGE.min(PURGE_MAX - ids.len());
        let (next, page) = overview::jobs(dep, queue, set, &cursor, want, None).await?;
        ids.extend(page.into_iter().map(|j| j.id));
        if next == "0" || ids.len() >= PURGE_MAX {
            return Ok(ids);
        }
        cursor = next;
    }
}

#[derive(Deserialize)]
pub struct Which {
    set: Option<String>,
}

/// `GET /queues/<queue>/purge?set=<set>`: what a purge would delete, and the form that does it.
pub async fn confirm(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Query(q): Query<Which>,
) -> Page {
    let set = q.set.unwrap_or_else(|| "pending".into());
    purgeable(&set)?;
    let total = overview::queue_row(&app.dep, &queue, 0).await?.count(&set);
    let jobs = note(&app.dep, &queue, &set).await?;
    let noted = jobs.len();
    let ticket = app.tickets.open(&queue, &set, jobs);
    Ok(pages::purge(&app, &queue, &set, noted, total, &ticket).into_response())
}

#[derive(Deserialize)]
pub struct Confirmed {
    csrf: String,
    set: String,
    ticket: Option<String>,
    confirm: Option<String>,
}

/// `POST /queues/<queue>/purge`: with the queue's name typed, deletes the jobs its confirmation
/// noted that are still in the set.
pub async fn purge(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Form(form): Form<Confirmed>,
) -> Page {
    checked(&app, &form.csrf)?;
    purgeable(&form.set)?;
    if form.confirm.as_deref().map(str::trim) != Some(queue.as_str()) {
        return Err(WebError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("type the queue's name, {queue}, to confirm the purge; nothing was purged"),
        ));
    }
    let Some(jobs) = form
        .ticket
        .as_deref()
        .and_then(|t| app.tickets.take(t, &queue, &form.set))
    else {
        return Err(WebError(
            StatusCode::CONFLICT,
            "this confirmation is used or expired; nothing was purged: open purge again".into(),
        ));
    };
    let n = delete(&app.dep, &queue, &form.set, jobs).await?;
    Ok(back_to(&queue, &form.set, &format!("{n} purged")))
}

/// Deletes the `jobs` of `set` that are still there; how many it deleted. Pending and scheduled
/// jobs go one by one (`EMQ.CANCEL ... UNSTARTED`: one a worker claimed since runs on); dead ones, which only `EMQ.PURGE` deletes, in steps of
/// the run of noted jobs at the head of the set (`EMQ.PURGE` deletes from the head), stopping
/// at one not noted.
async fn delete(dep: &Deployment, queue: &str, set: &str, jobs: Vec<String>) -> Result<i64> {
    let q = dep.queue(queue);
    let mut done = 0;
    if set != "dead" {
        for id in &jobs {
            done += i64::from(q.cancel_unstarted(id).await? > 0);
        }
        return Ok(done);
    }
    let mut left: HashSet<String> = jobs.into_iter().collect();
    while !left.is_empty() {
        let want = NOTE_PAGE.min(left.len());
        let (_, head) = overview::jobs(dep, queue, "dead", "0", want, None).await?;
        let run = head.iter().take_while(|j| left.contains(&j.id)).count();
        if run == 0 {
            break;
        }
        let args = [
            b"dead".to_vec(),
            b"COUNT".to_vec(),
            run.to_string().into_bytes(),
        ];
        done += int(&q.call("EMQ.PURGE", &args).await?)?;
        for j in &head[..run] {
            left.remove(&j.id);
        }
    }
    Ok(done)
}
