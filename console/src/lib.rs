//! `emq`, EchoMQ's console: plain subcommands ([`cli`]), a live terminal view ([`top`]) and a
//! web dashboard ([`web`]), all reading one deployment ([`deployment`]) through the same
//! queries ([`overview`]), a job's parents and children through [`flow`], a queue's groups
//! through [`groups`], in Prometheus's format through [`metrics`]; what they print to a terminal goes through [`escape`]. See
//! docs/console.md.

pub mod cli;
pub mod deployment;
pub mod error;
pub mod escape;
pub mod exposition;
pub mod flow;
pub mod flow_text;
pub mod groups;
pub mod history;
pub mod latency;
pub mod metrics;
pub mod overview;
pub mod top;
pub mod waits;
pub mod web;
