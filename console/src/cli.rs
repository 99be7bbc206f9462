//! `emq`'s subcommands: each reads or changes the deployment through [`crate::overview`] and the
//! client's `Queue`, and prints plain text for people or, with `--json`, one JSON document.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use echomq_client::Enqueue;

use crate::error::{Error, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value as Json};

use crate::deployment::Deployment;
use crate::escape::terminal;
use crate::flow;
use crate::flow_text::flow_text;
use crate::groups::{self, GroupRow};
use crate::overview::{self, QueueRow};

/// A refusal or a lost connection: the server's error is printed as it came.
pub const EXIT_ERROR: u8 = 1;
/// Usage errors exit 2, as clap's do.
pub const EXIT_USAGE: u8 = 2;
/// The job, or the change asked for, was not there: no such job, a requeue of a job not dead.
pub const EXIT_NOT_FOUND: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "emq",
    version,
    about = "EchoMQ's console: look at queues and operate them"
)]
pub struct Cli {
    /// The server, or any node of a cluster: redis://[user:password@]host:port[/db], or
    /// rediss:// for TLS.
    #[arg(
        long,
        global = true,
        env = "ECHOMQ_URL",
        // A password in the URL stays out of `--help`.
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub url: String,
    /// One JSON document on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub tls: crate::deployment::Tls,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Every queue of every primary, with its counts.
    Queues,
    /// The counts, pause flag and limits of the queues named (all of them when none is).
    Stats { queues: Vec<String> },
    /// One job: its row, set and score, and its flow (parents and children) when it has one.
    Job { queue: String, id: String },
    /// A page of one set's jobs, with their payloads and last errors.
    Jobs {
        queue: String,
        /// pending, active, scheduled, dead or waiting.
        set: String,
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
        count: u64,
        /// Where the previous page ended.
        #[arg(long, default_value = "0")]
        cursor: String,
    },
    /// A page of the queue's named groups, the largest backlog first, each with its ready and
    /// running jobs, its limit, whether its limit holds it back and whether it is paused.
    Groups {
        queue: String,
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
        count: u64,
        /// Where the previous page ended.
        #[arg(long, default_value = "0")]
        cursor: String,
    },
    /// Stops the queue's claims, or with --group the claims of one group's jobs (enqueues and
    /// the timer go on).
    Pause {
        queue: String,
        #[arg(long)]
        group: Option<String>,
        /// The group's pause ends by itself after this many milliseconds.
        #[arg(long, requires = "group", value_parser = clap::value_parser!(u64).range(1..=31_536_000_000))]
        for_ms: Option<u64>,
    },
    /// Lets claims take the queue's jobs again, or with --group one group's.
    Resume {
        queue: String,
        #[arg(long)]
        group: Option<String>,
    },
    /// Spreads an empty queue over this many partitions, queues of its own whose slots spread
    /// over the cluster's primaries (docs/cluster.md); producers and workers follow by its name.
    Span {
        queue: String,
        #[arg(value_parser = clap::value_parser!(u16).range(1..=1024))]
        partitions: u16,
    },
    /// Makes a partitioned queue ordinary again; its partitions, which must be empty, retire.
    Unspan { queue: String },
    /// Deletes every job of one set (pending, scheduled or dead), a bounded step at a time.
    Purge {
        queue: String,
        set: String,
        /// Do it: without --yes, purge asks on a terminal and refuses elsewhere.
        #[arg(long)]
        yes: bool,
    },
    /// Moves a dead job back to pending, or with --dead every dead job.
    Requeue {
        queue: String,
        id: Option<String>,
        #[arg(long, conflicts_with = "id")]
        dead: bool,
        /// With --dead, do it: without --yes it asks on a terminal and refuses elsewhere.
        #[arg(long)]
        yes: bool,
    },
    /// Removes a pending or scheduled job, or ends a running job's attempt (to dead).
    Cancel { queue: String, id: String },
    /// Enqueues one job; prints its id.
    Enqueue {
        queue: String,
        payload: String,
        /// The job's id (minted when not given, so a retry stays one job).
        #[arg(long)]
        id: Option<String>,
        /// Due after this many milliseconds.
        #[arg(long)]
        delay_ms: Option<u64>,
        #[arg(long, allow_negative_numbers = true)]
        priority: Option<i64>,
        /// The job's own limit on one attempt, in milliseconds: past it the server ends it.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=31_536_000_000))]
        timeout_ms: Option<u64>,
        /// The job's group (a tenant, say): claims take the queue's groups in turn.
        #[arg(long)]
        group: Option<String>,
        /// A header the job carries to each attempt, `<key>=<value>` (repeatable).
        #[arg(long = "header", value_parser = header_pair)]
        headers: Vec<(String, String)>,
    },
    /// A live view of every queue: counts, rates, the oldest pending job, the counters.
    Top {
        /// Milliseconds between refreshes.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
        interval_ms: u64,
    },
    /// Serves the web dashboard.
    Web(crate::web::Options),
    /// Serves the deployment's metrics in Prometheus's text format at /metrics, without the
    /// dashboard.
    Metrics {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:9187")]
        listen: std::net::SocketAddr,
    },
}

/// What a subcommand printed, as text and as JSON, and its exit code.
struct Output {
    text: String,
    json: Json,
    code: u8,
}

impl Output {
    /// One job's change: `{verb: 1}` done, or `{verb: 0}` and exit code 3 with `why_not`.
    fn changed(done: bool, verb: &str, why_not: String) -> Output {
        Output {
            text: if done { verb.to_string() } else { why_not },
            json: json!({ verb: u8::from(done) }),
            code: if done { 0 } else { EXIT_NOT_FOUND },
        }
    }

    fn ok(text: String, json: Json) -> Output {
        Output {
            text,
            json,
            code: 0,
        }
    }

    /// A pause or resume of the queue, or of its `group`: `{paused, changed[, group]}`.
    fn paused(text: String, paused: bool, changed: bool, group: Option<String>) -> Output {
        let mut json = json!({ "paused": paused, "changed": changed });
        if let Some(g) = group {
            json["group"] = json!(g);
        }
        Output::ok(text, json)
    }
}

pub async fn run(cli: Cli) -> Result<ExitCode> {
    let dep = Deployment::connect(&cli.url, &cli.tls).await?;
    let out = match cli.command {
        Command::Top { interval_ms } => {
            crate::top::run(dep, Duration::from_millis(interval_ms)).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Web(options) => {
            crate::web::serve(dep, options).await?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Metrics { listen } => {
            crate::metrics::serve(dep, listen).await?;
            return Ok(ExitCode::SUCCESS);
        }
        command => subcommand(&dep, command).await?,
    };
    if cli.json {
        println!("{}", crate::escape::json(&out.json.to_string()));
    } else if !out.text.is_empty() {
        println!("{}", out.text.trim_end());
    }
    Ok(ExitCode::from(out.code))
}

/// The rows as a table: a header line, then one line a queue (names and errors escaped).
pub fn table(rows: &[QueueRow]) -> String {
    let width = first_column(rows.iter().map(|r| r.name.as_str()));
    let mut out = format!(
        "{:<width$}  {:>9} {:>9} {:>9} {:>9} {:>9}  {:>8}  paused\n",
        "queue", "pending", "active", "scheduled", "dead", "waiting", "oldest"
    );
    for r in rows {
        out += &format!(
            "{:<width$}  {:>9} {:>9} {:>9} {:>9} {:>9}  {:>8}  {}\n",
            terminal(&r.name),
            r.pending,
            r.active,
            r.scheduled,
            r.dead,
            r.waiting,
            r.oldest_pending_ms.map_or("-".to_string(), overview::age),
            if r.paused { "yes" } else { "no" },
        );
        if let Some(e) = &r.error {
            out += &format!("  {}\n", terminal(e));
        }
    }
    out
}

/// The width of a table's first column: its longest name as printed, at least 5.
fn first_column<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|n| terminal(n).len()).max().unwrap_or(5).max(5)
}

/// A page's text, and where the next page starts unless it was the last (`next` "0").
fn more(mut text: String, next: &str) -> String {
    if next != "0" {
        text += &format!("more: --cursor {}\n", terminal(next));
    }
    text
}

/// The groups as a table: a header line, then one line a group (names escaped).
pub fn groups_table(rows: &[GroupRow], now_ms: u64) -> String {
    if rows.is_empty() {
        return "no groups\n".into();
    }
    let width = first_column(rows.iter().map(|r| r.group.as_str()));
    let mut out = format!(
        "{:<width$}  {:>9} {:>9} {:>6}  held  paused\n",
        "group", "ready", "active", "limit"
    );
    for r in rows {
        let paused = match (r.paused, r.left(now_ms)) {
            (false, _) => "no".to_string(),
            (true, None) => "yes".to_string(),
            (true, Some(left)) => format!("yes, {left} left"),
        };
        out += &format!(
            "{:<width$}  {:>9} {:>9} {:>6}  {:<4}  {paused}\n",
            terminal(&r.group),
            r.ready,
            r.active,
            r.concurrency.map_or("-".to_string(), |n| n.to_string()),
            if r.held { "yes" } else { "no" },
        );
    }
    out
}

async fn subcommand(dep: &Deployment, command: Command) -> Result<Output> {
    Ok(match command {
        Command::Queues => {
            let rows = overview::overview(dep).await?;
            Output::ok(table(&rows), json!(rows))
        }
        Command::Stats { queues } => {
            let names = if queues.is_empty() {
                dep.queues().await?
            } else {
                queues
            };
            let mut text = String::new();
            let mut all = serde_json::Map::new();
            for name in names {
                let stats = dep.queue(&name).stats().await?;
                let mut fields: Vec<_> = stats.into_iter().collect();
                fields.sort();
                let width = fields
                    .iter()
                    .map(|(k, _)| k.len())
                    .max()
                    .unwrap_or(0)
                    .max(12);
                text += &format!("{}\n", terminal(&name));
                for (k, v) in &fields {
                    text += &format!(
                        "  {:<width$} {}\n",
                        terminal(k),
                        v.map_or("-".to_string(), |n| n.to_string())
                    );
                }
                all.insert(
                    name,
                    json!(fields
                        .into_iter()
                        .map(|(k, v)| (k, json!(v)))
                        .collect::<serde_json::Map<_, _>>()),
                );
            }
            Output::ok(text, Json::Object(all))
        }
        Command::Job { queue, id } => match overview::job(dep, &queue, &id).await? {
            None => Output {
                text: format!("no job {} in {}", terminal(&id), terminal(&queue)),
                json: Json::Null,
                code: EXIT_NOT_FOUND,
            },
            Some(fields) => {
                let flow = flow::flow(dep, &queue, &id, &fields, flow::BOUNDS).await;
                let mut text: String = fields
                    .iter()
                    .map(|(k, v)| format!("{:<10} {}\n", terminal(k), terminal(v)))
                    .collect();
                let mut map: serde_json::Map<_, _> =
                    fields.into_iter().map(|(k, v)| (k, json!(v))).collect();
                if !flow.is_empty() {
                    text += &flow_text(&flow);
                    map.insert("flow".into(), json!(flow));
                }
                Output::ok(text, Json::Object(map))
            }
        },
        Command::Jobs {
            queue,
            set,
            count,
            cursor,
        } => {
            let (next, jobs) = overview::jobs(
                dep,
                &queue,
                &set,
                &cursor,
                count as usize,
                Some(overview::WHOLE),
            )
            .await?;
            let mut text = String::new();
            for j in &jobs {
                text += &format!(
                    "{}  score {}  attempts {}  {}\n",
                    terminal(&j.id),
                    j.score,
                    j.attempts,
                    terminal(&j.payload)
                );
                if let Some(e) = &j.error {
                    let first = e.lines().next().unwrap_or_default();
                    text += &format!("    error: {}\n", terminal(first));
                }
            }
            Output::ok(more(text, &next), json!({ "cursor": next, "jobs": jobs }))
        }
        Command::Groups {
            queue,
            count,
            cursor,
        } => {
            let (next, rows) = groups::groups(dep, &queue, &cursor, count as usize).await?;
            let text = more(groups_table(&rows, overview::now_ms()), &next);
            Output::ok(text, json!({ "cursor": next, "groups": rows }))
        }
        Command::Pause {
            queue,
            group,
            for_ms,
        } => {
            let changed = match &group {
                Some(g) => groups::pause(dep, &queue, g, for_ms).await?,
                None => dep.queue(&queue).pause().await?,
            };
            let mut text = if changed { "paused" } else { "paused already" }.to_string();
            if let Some(ms) = for_ms {
                text += &format!(" (resumes in {})", overview::age(ms));
            }
            Output::paused(text, true, changed, group)
        }
        Command::Resume { queue, group } => {
            let changed = match &group {
                Some(g) => groups::resume(dep, &queue, g).await?,
                None => dep.queue(&queue).resume().await?,
            };
            let text = if changed { "resumed" } else { "not paused" };
            Output::paused(text.into(), false, changed, group)
        }
        Command::Span { queue, partitions } => {
            let changed = dep.queue(&queue).span(partitions).await?;
            let text = format!(
                "{} over {partitions} partitions{}",
                terminal(&queue),
                if changed { "" } else { " already" }
            );
            Output::ok(
                text,
                json!({ "queue": queue, "partitions": partitions, "changed": changed }),
            )
        }
        Command::Unspan { queue } => {
            let changed = dep.queue(&queue).unspan().await?;
            let text = match changed {
                true => "an ordinary queue again",
                false => "an ordinary queue already",
            };
            Output::ok(text.into(), json!({ "queue": queue, "changed": changed }))
        }
        Command::Purge { queue, set, yes } => {
            let total = overview::queue_row(dep, &queue, 0).await?.count(&set);
            confirmed(
                yes,
                &format!("purge the {total} {set} jobs of {}", terminal(&queue)),
            )
            .await?;
            let bar = progress(total, "purged");
            let done = overview::drain(dep, &queue, &["EMQ.PURGE", &set], &set, |n| {
                advance(&bar, n)
            })
            .await?;
            bar.finish_and_clear();
            Output::ok(format!("{done} purged"), json!({ "purged": done }))
        }
        Command::Requeue {
            queue,
            id: Some(id),
            ..
        } => {
            let moved = dep.queue(&queue).requeue(&id).await?;
            Output::changed(moved, "requeued", format!("{} is not dead", terminal(&id)))
        }
        Command::Requeue {
            queue,
            id: None,
            dead,
            yes,
        } => {
            if !dead {
                return Err(Error::Usage(
                    "give a job id, or --dead for every dead job".into(),
                ));
            }
            let total = overview::queue_row(dep, &queue, 0).await?.dead;
            confirmed(
                yes,
                &format!("requeue the {total} dead jobs of {}", terminal(&queue)),
            )
            .await?;
            let bar = progress(total, "requeued");
            let done = overview::drain(dep, &queue, &["EMQ.REQUEUE", "DEAD"], "dead", |n| {
                advance(&bar, n)
            })
            .await?;
            bar.finish_and_clear();
            Output::ok(format!("{done} requeued"), json!({ "requeued": done }))
        }
        Command::Cancel { queue, id } => {
            let removed = dep.queue(&queue).cancel(&id).await?;
            Output::changed(
                removed,
                "cancelled",
                format!("{} is not pending, scheduled or active", terminal(&id)),
            )
        }
        Command::Enqueue {
            queue,
            payload,
            id,
            delay_ms,
            priority,
            timeout_ms,
            group,
            headers,
        } => {
            let how = Enqueue {
                id,
                delay: delay_ms.map(Duration::from_millis),
                priority,
                timeout: timeout_ms.map(Duration::from_millis),
                group,
                headers,
                ..Enqueue::default()
            };
            let id = dep
                .queue(&queue)
                .enqueue_with(payload.as_bytes(), how)
                .await?;
            Output::ok(terminal(&id).into_owned(), json!({ "id": id }))
        }
        Command::Top { .. } | Command::Web(_) | Command::Metrics { .. } => {
            Output::ok(String::new(), Json::Null)
        }
    })
}

/// `--header <key>=<value>`, split at its first `=`.
fn header_pair(text: &str) -> std::result::Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("a header is <key>=<value>, not {text:?}"))
}

/// Whether a change of many jobs (`what`, as "purge the 3 pending jobs of q") may go ahead:
/// with `--yes`, or when the person at a terminal answers `y`; anywhere else it is refused
/// (a usage error, exit 2) with what it would have done.
async fn confirmed(yes: bool, what: &str) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes {
        return Ok(());
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(Error::Usage(format!(
            "this would {what}: pass --yes to do it"
        )));
    }
    let question = format!("{what}? [y/N] ");
    let answer = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
        let mut err = std::io::stderr();
        err.write_all(question.as_bytes())?;
        err.flush()?;
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        Ok(line)
    })
    .await
    .map_err(std::io::Error::other)??;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        return Ok(());
    }
    Err(Error::Usage(format!("not confirmed: did not {what}")))
}

/// A bar on stderr for `total` jobs, drawn only when stderr is a terminal.
pub fn progress(total: i64, verb: &str) -> ProgressBar {
    let bar = ProgressBar::new(total.max(0) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(verb.to_string());
    bar
}

/// Moves `bar` to `done` jobs, stretching it when more were moved than it was sized for.
fn advance(bar: &ProgressBar, done: i64) {
    let done = done.max(0) as u64;
    bar.set_length(bar.length().unwrap_or(0).max(done));
    bar.set_position(done);
}
