//! A job's flow as `emq job` prints it: its parents, the parents that refused it, and its
//! children as a tree, each piece escaped for a terminal.

use crate::escape::terminal;
use crate::flow::{Children, Flow};

/// A job's flow as text: its parents with their states, the parents that refused it, and its
/// children as a tree, two spaces a level, each with how it finished and its own state.
pub fn flow_text(flow: &Flow) -> String {
    let mut out = String::new();
    if !flow.parents.is_empty() {
        out += "parents\n";
    }
    for p in &flow.parents {
        let state = match &p.error {
            Some(e) => format!("({})", terminal(e)),
            None => format!("state {}", terminal(p.state.as_deref().unwrap_or("gone"))),
        };
        out += &format!(
            "  {} {}  {state}  on-fail {}\n",
            terminal(&p.queue),
            terminal(&p.id),
            terminal(&p.policy)
        );
    }
    if !flow.orphan.is_empty() {
        out += "orphan of\n";
    }
    for o in &flow.orphan {
        out += &format!("  {} {}\n", terminal(&o.queue), terminal(&o.id));
    }
    if let Some(children) = &flow.children {
        children_text(children, 0, &mut out);
    }
    out
}

/// The `children` line of a parent and its children, at `level` (0 for the job's own).
fn children_text(c: &Children, level: usize, out: &mut String) {
    let indent = "  ".repeat(level);
    *out += &format!(
        "{indent}children  {} expected, {} registered, {} finished\n",
        c.expected, c.adopted, c.finished
    );
    if let Some(e) = &c.error {
        *out += &format!("{indent}  ({})\n", terminal(e));
    }
    for child in &c.shown {
        *out += &format!(
            "{indent}  {} {}  {}",
            terminal(&child.queue),
            terminal(&child.id),
            terminal(&child.status)
        );
        if child.read {
            let state = child.state.as_deref().unwrap_or("gone");
            *out += &format!("  state {}", terminal(state));
        }
        for o in &child.orphan {
            *out += &format!("  orphan of {} {}", terminal(&o.queue), terminal(&o.id));
        }
        if !child.data.is_empty() {
            let first = child.data.lines().next().unwrap_or_default();
            *out += &format!("  {}", terminal(first));
        }
        if let Some(e) = &child.error {
            *out += &format!("  ({})", terminal(e));
        }
        *out += "\n";
        if let Some(below) = &child.children {
            children_text(below, level + 2, out);
        }
    }
    if c.more > 0 {
        *out += &format!("{indent}  and {} more\n", c.more);
    }
}
