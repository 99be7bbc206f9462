//! One group's pause and resume from the queue page: `POST /queues/<queue>/groups/pause` and
//! `.../resume`, the group named in the form. The name travels in the body, not in the path, so
//! no name (`..`, `a/b`) can make a browser resolve the form's address to another action.

use std::sync::Arc;

use axum::extract::{Form, Path, State};
use serde::Deserialize;

use super::{back_to, checked, App, Page};
use crate::groups;

#[derive(Deserialize)]
pub struct GroupAction {
    csrf: String,
    group: String,
}

pub async fn pause(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Form(form): Form<GroupAction>,
) -> Page {
    checked(&app, &form.csrf)?;
    let changed = groups::pause(&app.dep, &queue, &form.group, None).await?;
    let done = if changed { "paused" } else { "paused already" };
    Ok(back_to(
        &queue,
        "pending",
        &format!("{} {done}", form.group),
    ))
}

pub async fn resume(
    State(app): State<Arc<App>>,
    Path(queue): Path<String>,
    Form(form): Form<GroupAction>,
) -> Page {
    checked(&app, &form.csrf)?;
    let changed = groups::resume(&app.dep, &queue, &form.group).await?;
    let done = if changed { "resumed" } else { "not paused" };
    Ok(back_to(
        &queue,
        "pending",
        &format!("{} {done}", form.group),
    ))
}
