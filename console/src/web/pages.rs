//! The dashboard's pages. maud escapes every value interpolated into them, so a payload, an
//! error or a queue name shows as text; the only markup taken as it is are the charts this
//! process drew from numbers.

use axum::http::StatusCode;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::chart::sparkline;
use super::{panels, App};
use crate::flow::{Children, Flow};
use crate::groups::GroupRow;
use crate::history::History;
use crate::overview::{age, cut, now_ms, JobEntry, QueueRow, PURGEABLE, SETS};

/// What a path segment or query value keeps as it is; the rest is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

pub fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// Bytes of a payload (and of an error) a list keeps and shows before cutting it.
pub const PREVIEW: usize = 200;

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1f2937;background:#f9fafb}
header{background:#111827;color:#fff;padding:10px 20px}header a{color:#fff;text-decoration:none;font-weight:600}
main{padding:16px 20px}table{border-collapse:collapse;background:#fff;width:100%}
th,td{border-bottom:1px solid #e5e7eb;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;word-break:break-all;margin:0;font-size:12px}
form{display:inline}button{cursor:pointer;margin:2px}.flash{background:#ecfdf5;padding:6px 10px;margin-bottom:10px}
.error{background:#fef2f2;padding:10px}.tabs a{margin-right:12px}.tabs a.on{font-weight:700}
.rates span{margin-right:24px}.paused{color:#b45309;font-weight:600}#groups{margin-bottom:12px}
.charts{display:flex;flex-wrap:wrap;gap:16px;margin-bottom:12px}figure.chart{margin:0}
figcaption{font-size:12px}.axis{display:flex;justify-content:space-between;font-size:10px;color:#6b7280}
.legend{font-size:12px;margin:0 0 12px}";

fn layout(title: &str, refresh: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if refresh { meta http-equiv="refresh" content="5"; }
                title { (title) " · emq" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header { a href="/" { "EchoMQ" } " · " (title) }
                main { (body) }
            }
        }
    }
}

pub fn error(status: StatusCode, message: &str) -> Markup {
    layout(
        "error",
        false,
        html! {
            div.error { strong { (status.as_u16()) } " " pre #error { (message) } }
        },
    )
}

/// A POST form with the CSRF token; nothing at all on a read-only dashboard.
fn action(app: &App, path: &str, label: &str) -> Markup {
    action_with(app, path, label, &[])
}

/// [`action`], the form also carrying the `fields` given (name, value) as hidden inputs.
fn action_with(app: &App, path: &str, label: &str, fields: &[(&str, &str)]) -> Markup {
    if app.read_only {
        return html! {};
    }
    html! {
        form method="post" action=(path) {
            input type="hidden" name="csrf" value=(app.csrf);
            @for (name, value) in fields { input type="hidden" name=(name) value=(value); }
            button type="submit" { (label) }
        }
    }
}

fn rates(history: &History) -> Markup {
    let error = history.latest().and_then(|s| s.counters_error.as_deref());
    html! {
        @if let Some(e) = error { p.error #counters-error { "no rates: " (e) } }
        div.charts { (panels::server_rates(history)) }
    }
}

pub fn index(app: &App, rows: &[QueueRow], history: &History) -> Markup {
    layout(
        "queues",
        true,
        html! {
            (rates(history))
            p { (rows.len()) " queues" @if app.dep.cluster { ", on " (app.dep.primaries.len()) " primaries" } }
            table #queues {
                thead { tr {
                    th { "queue" } th { "pending" } th { "active" } th { "scheduled" } th { "dead" }
                    th { "waiting" } th { "oldest pending" } th { "backlog, last minute" } th { "acked/s, last minute" } th {}
                } }
                tbody {
                    @for q in rows {
                        tr data-queue=(q.name) {
                            td { a href={ "/queues/" (segment(&q.name)) } { (q.name) } }
                            td.n.pending { (q.pending) } td.n.active { (q.active) }
                            td.n.scheduled { (q.scheduled) } td.n.dead { (q.dead) }
                            td.n.waiting { (q.waiting) }
                            td.n { (q.oldest_pending_ms.map_or("-".to_string(), age)) }
                            td { (PreEscaped(sparkline(&history.backlog_series(&q.name, "pending"), 120, 24))) }
                            td.acked {
                                @match history.queue_rate(&q.name, "acked") {
                                    Some(r) => { (format!("{r:.1}")) " " (PreEscaped(sparkline(&history.queue_rate_series(&q.name, "acked"), 120, 24))) }
                                    None => { span title="EMQ.EVENTS <queue> ON shows it" { "-" } }
                                }
                            }
                            td {
                                @if q.paused { span.paused { "paused" } }
                                @if let Some(e) = &q.error { pre.error { (e) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// One page of a list on a queue's page: its items, and the cursor of the next (`"0"`: none).
pub struct Paged<'a, T> {
    pub items: &'a [T],
    pub next: &'a str,
}

/// A queue's page: its state and actions, rates, its groups when it has named ones, and a page
/// of the jobs of `set`.
pub fn queue(
    app: &App,
    row: &QueueRow,
    set: &str,
    jobs: Paged<'_, JobEntry>,
    groups: Option<Paged<'_, GroupRow>>,
    done: Option<&str>,
    history: &History,
) -> Markup {
    let base = format!("/queues/{}", segment(&row.name));
    layout(
        &row.name,
        true,
        html! {
            @if let Some(done) = done { div.flash #flash { (done) } }
            p {
                @if row.paused { span.paused #state { "paused" } " " (action(app, &format!("{base}/resume"), "resume")) }
                @else { span #state { "running" } " " (action(app, &format!("{base}/pause"), "pause")) }
                @if row.dead > 0 && row.partitions.is_empty() { (action(app, &format!("{base}/requeue-dead"), "requeue all dead")) }
            }
            div.charts {
                (panels::backlog(history, &row.name))
                (panels::rates(history, &row.name))
            }
            @if row.flow.is_none() { p #no-metrics { "(no rates or latency: this queue's metrics could not be read, or the server keeps none now: emq.metrics)" } }
            div.charts { (panels::latency(history, &row.name)) }
            @if let Some(groups) = groups { (groups_section(app, row, set, &groups)) }
            @if !row.partitions.is_empty() { (partitions_section(row)) }
            @else { (jobs_section(app, row, set, &jobs)) }
        },
    )
}

/// A partitioned queue's partitions (docs/cluster.md): each with its counts and the primary
/// that serves it, and a link to its own page.
fn partitions_section(row: &QueueRow) -> Markup {
    html! {
        h3 { "partitions" }
        p { (row.partitions.len()) " partitions; the counts above are theirs added up" }
        table #partitions {
            thead { tr {
                th { "partition" } th { "primary" } th { "pending" } th { "active" } th { "scheduled" } th { "dead" } th { "paused" }
            } }
            tbody {
                @for p in &row.partitions {
                    tr data-partition=(p.name) {
                        td { a href={ "/queues/" (segment(&p.name)) } { (p.name) } }
                        td.primary { (p.primary.as_deref().unwrap_or("-")) }
                        td.n { (p.pending) } td.n { (p.active) } td.n { (p.scheduled) } td.n { (p.dead) }
                        td { @if p.paused { "yes" } @else { "no" } }
                    }
                }
            }
        }
    }
}

/// A page of one of the queue's sets, with a tab a set.
fn jobs_section(app: &App, row: &QueueRow, set: &str, jobs: &Paged<'_, JobEntry>) -> Markup {
    let base = format!("/queues/{}", segment(&row.name));
    html! {
            div.tabs {
                @for s in SETS {
                    a.on[s == set] href={ (base) "?set=" (s) } { (s) " (" (row.count(s)) ")" }
                }
                @if !app.read_only && PURGEABLE.contains(&set) && row.count(set) > 0 {
                    a #purge href={ (base) "/purge?set=" (segment(set)) } { "purge " (set) "…" }
                }
            }
            table #jobs {
                thead { tr { th { "id" } th { "score" } th { "attempts" } th { "payload" } th { "last error" } } }
                tbody {
                    @for j in jobs.items {
                        tr data-id=(j.id) {
                            td { a href={ (base) "/jobs/" (segment(&j.id)) } { (j.id) } }
                            td.n { (j.score) } td.n { (j.attempts) }
                            td { pre.payload { (preview(j)) } }
                            td { pre { (j.error.as_deref().and_then(|e| e.lines().next()).unwrap_or_default()) } }
                        }
                    }
                }
            }
            @if jobs.next != "0" { p { a #next href={ (base) "?set=" (segment(set)) "&cursor=" (segment(jobs.next)) } { "next page" } } }
    }
}

/// The queue's named groups, the largest backlog first: each with its ready and running jobs,
/// its limit, whether its limit holds it back and its pause, and a pause or resume button; a
/// link to the next page of them (`?groups=<cursor>`).
fn groups_section(app: &App, row: &QueueRow, set: &str, groups: &Paged<'_, GroupRow>) -> Markup {
    let base = format!("/queues/{}", segment(&row.name));
    let now = now_ms();
    html! {
        h3 { "groups" }
        p { (row.groups) " named groups, the largest backlog first" }
        table #groups {
            thead { tr {
                th { "group" } th { "ready" } th { "active" } th { "limit" } th { "held" } th { "paused" } th {}
            } }
            tbody {
                @for g in groups.items {
                    tr data-group=(g.group) {
                        td { (g.group) }
                        td.n.ready { (g.ready) } td.n.active { (g.active) }
                        td.n.limit { (g.concurrency.map_or("-".to_string(), |n| n.to_string())) }
                        td.held { @if g.held { "yes" } @else { "no" } }
                        td.pause {
                            @if g.paused { span.paused { "paused" } @if let Some(left) = g.left(now) { ", " (left) " left" } }
                            @else { "no" }
                        }
                        td {
                            @let group = [("group", g.group.as_str())];
                            @if g.paused { (action_with(app, &format!("{base}/groups/resume"), "resume", &group)) }
                            @else { (action_with(app, &format!("{base}/groups/pause"), "pause", &group)) }
                        }
                    }
                }
            }
        }
        @if groups.next != "0" {
            p { a #next-groups href={ (base) "?set=" (segment(set)) "&groups=" (segment(groups.next)) } { "next groups" } }
        }
    }
}

/// The purge's confirmation: what it deletes, and the form that does it once the queue's name
/// is typed (the server checks it).
pub fn purge(app: &App, queue: &str, set: &str, noted: usize, total: i64, ticket: &str) -> Markup {
    let base = format!("/queues/{}", segment(queue));
    layout(
        &format!("{queue} · purge {set}"),
        false,
        html! {
            p #what {
                "Purge deletes the " strong { (noted) " " (set) " jobs" } " of " strong { (queue) }
                " that are there now, for good. Jobs that come after this page stay."
            }
            @if (noted as i64) < total {
                p #more { "The set holds " (total) ": this purge takes its first " (noted) "; purge again for the rest." }
            }
            form method="post" action={ (base) "/purge" } {
                input type="hidden" name="csrf" value=(app.csrf);
                input type="hidden" name="set" value=(set);
                input type="hidden" name="ticket" value=(ticket);
                label { "Type the queue's name to confirm: " input type="text" name="confirm" required autocomplete="off"; }
                " " button type="submit" { "purge " (noted) " jobs" }
            }
            p { a href={ (base) "?set=" (segment(set)) } { "← back, purging nothing" } }
        },
    )
}

/// A listed job's payload: whole when short, else its first bytes and its size.
fn preview(j: &JobEntry) -> String {
    if j.payload_bytes <= PREVIEW {
        return j.payload.clone();
    }
    format!("{}… ({} bytes)", j.payload, j.payload_bytes)
}

/// Bytes of each field (payload, error, result, progress) a job page shows at most.
pub const SHOWN: usize = 64 * 1024;

/// One field of a job as its page shows it: the first [`SHOWN`] bytes, and the whole size.
pub struct Field {
    pub name: String,
    pub text: String,
    pub bytes: usize,
}

/// The job's fields as the server sent them, each cut to [`SHOWN`] bytes.
pub fn fields(raw: Vec<(String, Vec<u8>)>) -> Vec<Field> {
    raw.into_iter()
        .map(|(name, value)| Field {
            text: cut(&value, SHOWN).0,
            bytes: value.len(),
            name,
        })
        .collect()
}

pub fn job(
    app: &App,
    queue: &str,
    id: &str,
    fields: &[Field],
    flow: &Flow,
    history: &[(u64, String)],
    done: Option<&str>,
) -> Markup {
    let base = format!("/queues/{}/jobs/{}", segment(queue), segment(id));
    let set = fields
        .iter()
        .find(|f| f.name == "set")
        .map_or("", |f| f.text.as_str());
    layout(
        &format!("{queue} · {id}"),
        false,
        html! {
            @if let Some(done) = done { div.flash #flash { (done) } }
            p {
                a href={ "/queues/" (segment(queue)) } { "← " (queue) }
                " "
                @if set == "dead" { (action(app, &format!("{base}/requeue"), "requeue")) }
                @if set == "pending" || set == "scheduled" { (action(app, &format!("{base}/cancel"), "cancel")) }
                // A running job's attempt ends at once: its worker stops the handler at its next
                // renewal, and the job goes to dead (error `cancelled`).
                @if set == "active" { (action(app, &format!("{base}/cancel"), "cancel the running job")) }
            }
            table #job {
                @for f in fields {
                    tr { th { (f.name) } td {
                        pre data-field=(f.name) { (f.text) }
                        @if f.bytes > SHOWN {
                            p.cut data-cut=(f.name) {
                                (f.bytes) " bytes, first " (SHOWN / 1024) " KiB shown"
                                @if f.name == "payload" { " · " a #whole href={ (base) "/payload" } { "download the whole payload" } }
                            }
                        }
                    } }
                }
            }
            @if !flow.is_empty() { (flow_section(flow)) }
            @if !history.is_empty() {
                h3 { "history" }
                table #history {
                    @for (at, event) in history { tr { td.n { (at) } td { (event) } } }
                }
            }
        },
    )
}

/// The page of the job `queue`/`id`.
fn job_link(queue: &str, id: &str) -> String {
    format!("/queues/{}/jobs/{}", segment(queue), segment(id))
}

/// A job's flow: its parents and the parents that refused it, each a link, then its children
/// as a nested list of links, each with how it finished and its own state.
fn flow_section(flow: &Flow) -> Markup {
    html! {
        h3 { "flow" }
        @if !flow.parents.is_empty() {
            table #parents {
                thead { tr { th { "parent" } th { "state" } th { "on fail" } } }
                tbody {
                    @for p in &flow.parents {
                        tr data-queue=(p.queue) data-id=(p.id) {
                            td { a href=(job_link(&p.queue, &p.id)) { (p.queue) " " (p.id) } }
                            td.state {
                                @match &p.error {
                                    Some(e) => { pre.error { (e) } }
                                    None => { (p.state.as_deref().unwrap_or("gone")) }
                                }
                            }
                            td { (p.policy) }
                        }
                    }
                }
            }
        }
        @if !flow.orphan.is_empty() {
            p #orphan {
                "refused at hand-over by: "
                @for o in &flow.orphan { a.orphan href=(job_link(&o.queue, &o.id)) { (o.queue) " " (o.id) } " " }
            }
        }
        @if let Some(children) = &flow.children { div #children { (children_list(children)) } }
    }
}

fn children_list(c: &Children) -> Markup {
    html! {
        p.counts { (c.expected) " children expected, " (c.adopted) " registered, " (c.finished) " finished" }
        @if let Some(e) = &c.error { pre.error { (e) } }
        ul {
            @for child in &c.shown {
                li.child data-queue=(child.queue) data-id=(child.id) data-status=(child.status) {
                    a href=(job_link(&child.queue, &child.id)) { (child.queue) " " (child.id) }
                    " · " strong.status { (child.status) }
                    @if child.read { " · state " span.state { (child.state.as_deref().unwrap_or("gone")) } }
                    @for o in &child.orphan { " · orphan of " a href=(job_link(&o.queue, &o.id)) { (o.queue) " " (o.id) } }
                    @if !child.data.is_empty() { pre.data { (child.data) } }
                    @if let Some(e) = &child.error { pre.error { (e) } }
                    @if let Some(below) = &child.children { (children_list(below)) }
                }
            }
            @if c.more > 0 { li.more { "and " (c.more) " more" } }
        }
    }
}
