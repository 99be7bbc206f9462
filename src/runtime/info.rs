//! The `INFO emq` section: the protocol version, the job counters, the effects gate, the
//! timer's state and one counter per refusal reason.

use valkey_module::{InfoContext, ValkeyResult};

use crate::host::events::InfoSection;
use crate::host::meta_cache::meta_read;
use crate::host::propagate::{gate_open, others_listen};
use crate::protocol::counters::{
    get, JOB_COUNTERS, POLLED, REFUSALS, REFUSAL_REASONS, TICKS, TICKS_AT_BUDGET, VISITS_REFUSED,
};
use crate::protocol::PROTOCOL_VERSION;

use super::{queues, timer, waiters};

pub struct Info;

impl InfoSection for Info {
    fn info(ctx: &InfoContext) {
        let _ = section(ctx);
    }
}

fn section(ctx: &InfoContext) -> ValkeyResult<()> {
    // The module's own section, `# emq`: its fields read `emq_<name>`.
    let mut s = ctx
        .builder()
        .add_section("")
        .field("version", PROTOCOL_VERSION)?;
    for (name, counter) in JOB_COUNTERS.iter() {
        s = s.field(name, get(counter))?;
    }
    s = s
        .field("effects_replicated", u64::from(gate_open()))?
        .field("command_filter", u64::from(super::command_filter()))?
        .field("own_events_direct", u64::from(!others_listen()))?
        .field("meta_read", u64::from(meta_read()))?
        .field("watched_queues", timer::watched_queues() as u64)?
        .field("known_queues", queues::known_queues() as u64)?
        .field("timer_due_queues", timer::due_queues() as u64)?
        .field("timer_ticks", get(&TICKS))?
        .field("timer_ticks_at_budget", get(&TICKS_AT_BUDGET))?
        .field("timer_visits_refused", get(&VISITS_REFUSED))?
        .field("waited_queues", waiters::count() as u64)?
        .field("timer_polled", get(&POLLED))?;
    let (metered, running) = crate::host::metrics::sizes();
    s = s
        .field("metrics_queues", metered as u64)?
        .field("metrics_running", running as u64)?;
    for (reason, counter) in REFUSAL_REASONS.iter().zip(REFUSALS.iter()) {
        s = s.field(&format!("refused_{reason}"), get(counter))?;
    }
    s.build_section()?.build_info()?;
    Ok(())
}
