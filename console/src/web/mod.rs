//! `emq web`: the dashboard, served by axum. Pages are maud templates (every interpolated value
//! is HTML-escaped), charts are SVG drawn here, and nothing is fetched from elsewhere. Safe by
//! default: loopback unless told otherwise, Basic auth required off loopback, only the names it
//! is served as ([`origin`]), every action a POST from its own pages carrying the process's CSRF
//! token, none at all with `--read-only`.

mod chart;
mod groups;
mod origin;
mod pages;
mod panels;
mod purge;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use serde::Deserialize;
use tokio::sync::RwLock;

use crate::deployment::Deployment;
use crate::flow;
use crate::history::{History, Sampler};
use crate::overview;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Where to listen; anything but loopback needs --auth.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Show everything, change nothing: no action is served or shown.
    #[arg(long)]
    pub read_only: bool,
    /// Another name the dashboard is served as (`name` for any port, `name:port`), beside the
    /// listen address (and, on loopback, localhost, 127.0.0.1 and [::1]); repeatable.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// user:password for HTTP Basic auth.
    #[arg(long, env = "ECHOMQ_WEB_AUTH", hide_env_values = true)]
    pub auth: Option<String>,
    /// Milliseconds between samples of the deployment (the charts' resolution).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(200..=60_000))]
    pub interval_ms: u64,
}

pub struct App {
    pub dep: Deployment,
    pub history: RwLock<History>,
    pub csrf: String,
    pub read_only: bool,
    auth: Option<String>,
    hosts: origin::Hosts,
    tickets: purge::Tickets,
}

/// A page that could not be made: the server's error, shown as it came (escaped).
pub struct WebError(StatusCode, String);

impl From<Error> for WebError {
    fn from(e: Error) -> WebError {
        WebError(StatusCode::BAD_GATEWAY, e.to_string())
    }
}

impl From<echomq_client::Error> for WebError {
    fn from(e: echomq_client::Error) -> WebError {
        Error::from(e).into()
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        (self.0, pages::error(self.0, &self.1)).into_response()
    }
}

type Page = std::result::Result<Response, WebError>;

pub async fn serve(dep: Deployment, options: Options) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(options.bind).await?;
    let addr = listener.local_addr()?;
    // The names it answers to carry the port it got (`--bind ...:0`).
    let app = app(
        dep,
        &Options {
            bind: addr,
            ..options.clone()
        },
    )?;
    eprintln!(
        "emq web: serving http://{addr}/{}",
        if app.read_only { " (read-only)" } else { "" }
    );
    let sampler = Arc::clone(&app);
    let interval = Duration::from_millis(options.interval_ms);
    tokio::spawn(async move {
        let mut streams = Sampler::default();
        loop {
            if let Ok(s) = streams.sample(&sampler.dep).await {
                sampler.history.write().await.push(s);
            }
            tokio::time::sleep(interval).await;
        }
    });
    axum::serve(listener, router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// The dashboard's state, refusing a bind off loopback without auth.
pub fn app(dep: Deployment, options: &Options) -> Result<Arc<App>> {
    if !options.bind.ip().is_loopback() && options.auth.is_none() {
        return Err(Error::Usage(format!(
            "emq web binds {} only with --auth user:password (or ECHOMQ_WEB_AUTH)",
            options.bind
        )));
    }
    if options.auth.as_deref().is_some_and(|a| !a.contains(':')) {
        return Err(Error::Usage("--auth is user:password".into()));
    }
    Ok(Arc::new(App {
        dep,
        history: RwLock::new(History::default()),
        csrf: format!("{:032x}", rand::random::<u128>()),
        read_only: options.read_only,
        auth: options.auth.clone(),
        hosts: origin::Hosts::new(options.bind, &options.allow_host)?,
        tickets: purge::Tickets::default(),
    }))
}

pub fn router(app: Arc<App>) -> Router {
    let mut routes = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/queues/{queue}", get(queue_page))
        .route("/queues/{queue}/jobs/{id}", get(job_page))
        .route("/queues/{queue}/jobs/{id}/payload", get(job_payload));
    if !app.read_only {
        routes = routes
            .route("/queues/{queue}/pause", post(pause))
            .route("/queues/{queue}/resume", post(resume))
            .route("/queues/{queue}/groups/pause", post(groups::pause))
            .route("/queues/{queue}/groups/resume", post(groups::resume))
            .route(
                "/queues/{queue}/purge",
                get(purge::confirm).post(purge::purge),
            )
            .route("/queues/{queue}/requeue-dead", post(requeue_dead))
            .route("/queues/{queue}/jobs/{id}/requeue", post(requeue_job))
            .route("/queues/{queue}/jobs/{id}/cancel", post(cancel_job));
    }
    // Outermost first: the headers on every response, then the Host and Origin check, then auth.
    routes
        .layer(middleware::from_fn_with_state(Arc::clone(&app), basic_auth))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            origin::guard,
        ))
        .layer(middleware::from_fn(headers))
        .with_state(app)
}

/// No framing, no scripts, nothing from elsewhere, forms only to this server.
async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// Equal without a shortcut on the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn basic_auth(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let Some(expected) = &app.auth else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        });
    if given.is_some_and(|g| same(&g, expected.as_bytes())) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"emq\", charset=\"UTF-8\"",
        )],
        "authentication required",
    )
        .into_response()
}

/// The deployment in Prometheus's text format ([`crate::metrics`]).
async fn metrics(State(app): State<Arc<App>>) -> Page {
    Ok(crate::metrics::response(
        crate::metrics::render(&app.dep).await?,
    ))
}

async fn index(State(app): State<Arc<App>>) -> Page {
    let rows = overview::overview(&app.dep).await?;
    let history = app.history.read().await;
    Ok(pages::index(&app, &rows, &history).into_response())
}

#[derive(Deserialize)]
struct Listing {
    set: Option<String>,
    cursor: Option<String>,
    /// Where the page of the queue's groups starts.
    groups: Option<String>,
    done: Option<String>,
}

/// Jobs a queue page lists.
const PAGE: usize = 50;
/// Groups a queue page lists.
const GROUPS_PAGE: usize = 20;

async fn queue_page(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Query(q): Query<Listing>,
) -> Page {
    let set = q.set.unwrap_or_else(|| "pending".into());
    let cursor = q.cursor.unwrap_or_else(|| "0".into());
    let row = overview::queue_row(&app.dep, &queue, overview::now_ms()).await?;
    let (next, jobs) =
        overview::jobs(&app.dep, &queue, &set, &cursor, PAGE, Some(pages::PREVIEW)).await?;
    // A queue whose jobs are all in the default group has no groups to show; a partitioned
    // queue's are on its partitions' pages.
    let groups = match row.groups {
        _ if !row.partitions.is_empty() => None,
        0 => None,
        _ => {
            let from = q.groups.as_deref().unwrap_or("0");
            Some(crate::groups::groups(&app.dep, &queue, from, GROUPS_PAGE).await?)
        }
    };
    let history = app.history.read().await;
    let jobs = pages::Paged {
        items: &jobs,
        next: &next,
    };
    let groups = groups
        .as_ref()
        .map(|(next, items)| pages::Paged { items, next });
    Ok(pages::queue(&app, &row, &set, jobs, groups, q.done.as_deref(), &history).into_response())
}

async fn job_page(
    State(app): State<Arc<App>>,
    Path((queue, id)): Path<(String, String)>,
    Query(q): Query<Listing>,
) -> Page {
    let Some(raw) = overview::job_bytes(&app.dep, &queue, &id).await? else {
        return Err(no_job(&queue, &id));
    };
    let flow = flow::flow(
        &app.dep,
        &queue,
        &id,
        &flow::flow_fields(&raw),
        flow::BOUNDS,
    )
    .await;
    let fields = pages::fields(raw);
    let history = overview::job_history(&app.dep, &queue, &id, 100).await?;
    let done = q.done.as_deref();
    Ok(pages::job(&app, &queue, &id, &fields, &flow, &history, done).into_response())
}

fn no_job(queue: &str, id: &str) -> WebError {
    WebError(StatusCode::NOT_FOUND, format!("no job {id} in {queue}"))
}

/// The whole payload, as bytes to save (never to show: a page shows its first 64 KiB).
async fn job_payload(
    State(app): State<Arc<App>>,
    Path((queue, id)): Path<(String, String)>,
) -> Page {
    let Some(raw) = overview::job_bytes(&app.dep, &queue, &id).await? else {
        return Err(no_job(&queue, &id));
    };
    let payload = raw
        .into_iter()
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v)
        .ok_or_else(|| no_job(&queue, &id))?;
    let file: String = id.chars().filter(char::is_ascii_alphanumeric).collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}.payload\""),
            ),
        ],
        payload,
    )
        .into_response())
}

#[derive(Deserialize)]
struct Action {
    csrf: String,
}

fn checked(app: &App, csrf: &str) -> std::result::Result<(), WebError> {
    if same(csrf.as_bytes(), app.csrf.as_bytes()) {
        return Ok(());
    }
    Err(WebError(
        StatusCode::FORBIDDEN,
        "the form's CSRF token is not this dashboard's".into(),
    ))
}

fn back_to(queue: &str, set: &str, done: &str) -> Response {
    Redirect::to(&format!(
        "/queues/{}?set={}&done={}",
        pages::segment(queue),
        pages::segment(set),
        pages::segment(done)
    ))
    .into_response()
}

async fn pause(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Form(form): Form<Action>,
) -> Page {
    checked(&app, &form.csrf)?;
    let changed = app.dep.queue(&queue).pause().await?;
    Ok(back_to(
        &queue,
        "pending",
        if changed { "paused" } else { "paused already" },
    ))
}

async fn resume(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Form(form): Form<Action>,
) -> Page {
    checked(&app, &form.csrf)?;
    let changed = app.dep.queue(&queue).resume().await?;
    Ok(back_to(
        &queue,
        "pending",
        if changed { "resumed" } else { "not paused" },
    ))
}

async fn requeue_dead(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Form(form): Form<Action>,
) -> Page {
    checked(&app, &form.csrf)?;
    let n = overview::drain(&app.dep, &queue, &["EMQ.REQUEUE", "DEAD"], "dead", |_| {}).await?;
    Ok(back_to(&queue, "dead", &format!("{n} requeued")))
}

fn to_job(queue: &str, id: &str, done: &str) -> Response {
    Redirect::to(&format!(
        "/queues/{}/jobs/{}?done={}",
        pages::segment(queue),
        pages::segment(id),
        pages::segment(done)
    ))
    .into_response()
}

async fn requeue_job(
    State(app): State<Arc<App>>,
    Path((queue, id)): Path<(String, String)>,
    Form(form): Form<Action>,
) -> Page {
    checked(&app, &form.csrf)?;
    let moved = app.dep.queue(&queue).requeue(&id).await?;
    Ok(to_job(
        &queue,
        &id,
        if moved { "requeued" } else { "not dead" },
    ))
}

async fn cancel_job(
    State(app): State<Arc<App>>,
    Path((queue, id)): Path<(String, String)>,
    Form(form): Form<Action>,
) -> Page {
    checked(&app, &form.csrf)?;
    let removed = app.dep.queue(&queue).cancel(&id).await?;
    if removed {
        return Ok(back_to(&queue, "pending", &format!("{id} cancelled")));
    }
    Ok(to_job(&queue, &id, "not pending, scheduled or active"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_compares_whole_values() {
        assert!(same(b"ann:secret", b"ann:secret"));
        assert!(!same(b"ann:secret", b"ann:secreT"));
        assert!(!same(b"ann:secret", b"ann:secret2"));
        assert!(!same(b"", b"x"));
    }
}
