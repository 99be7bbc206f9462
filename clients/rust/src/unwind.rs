//! A handler run behind a panic guard: a panic, in the call or in its future, becomes the job's
//! failure (`panicked: <message>`), never the worker task's end.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::task::Poll;

use crate::job::{Failure, Outcome};

/// Runs the handler `make` starts; a panic, in the call or in the future, is the failure
/// `panicked: <message>` (so the job is failed like any other, its renewals stop and its slot
/// is freed), never the task's end.
pub(crate) async fn guarded<F>(make: impl FnOnce() -> F) -> Outcome
where
    F: Future<Output = Outcome>,
{
    let handler = match catch_unwind(AssertUnwindSafe(make)) {
        Ok(handler) => handler,
        Err(payload) => return panicked(payload),
    };
    let mut handler = pin!(handler);
    std::future::poll_fn(|cx| {
        match catch_unwind(AssertUnwindSafe(|| handler.as_mut().poll(cx))) {
            Ok(poll) => poll,
            // Never polled again: the outcome is ready.
            Err(payload) => Poll::Ready(panicked(payload)),
        }
    })
    .await
}

/// A panic as the failure it makes.
fn panicked(payload: Box<dyn Any + Send>) -> Outcome {
    let message = panic_message(payload.as_ref());
    tracing::error!(panic = %message, "a handler panicked; its job is failed");
    Err(Failure::Error(format!("panicked: {message}")))
}

/// A panic's message (`panic!` gives a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
