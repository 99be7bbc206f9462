//! Each phase's partitioned queue: [`WIDTH`] partitions spread over the three primaries,
//! spanned by the harness before the load starts. Its producer mints each id and sends the job
//! to the partition the id routes to; its workers are the shipped ones, given the queue's name.
//! The checker sees it as one queue: its partitions' rows are merged, and a row in a partition
//! its id does not route to, or in two partitions, is a violation.

use std::collections::HashSet;
use std::time::Duration;

use echomq_client::partition::{name, route};
use echomq_client::slot::slot;

use crate::check::QueueState;
use crate::cluster::{connect, owner, slot_map};
use crate::docker::Node;

/// Partitions of each phase's partitioned queue.
pub const WIDTH: u16 = 12;

/// A partitioned queue: its name and slot (where its `meta` is), and each partition's.
#[derive(Clone)]
pub struct Spanned {
    pub queue: String,
    pub slot: u16,
    pub partitions: Vec<(String, u16)>,
}

impl Spanned {
    /// `queue` over [`WIDTH`] partitions, named as the module names them.
    pub fn new(queue: &str) -> Result<Spanned, String> {
        let partitions = (0..WIDTH)
            .map(|i| {
                name(queue, i, WIDTH)
                    .map(|p| {
                        let s = slot(&p);
                        (p, s)
                    })
                    .ok_or_else(|| format!("{queue} has no partition {i} of {WIDTH}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Spanned {
            queue: queue.to_string(),
            slot: slot(queue),
            partitions,
        })
    }

    /// The partition job `id` goes to, and its slot.
    pub fn partition_of(&self, id: &str) -> &(String, u16) {
        &self.partitions[usize::from(route(WIDTH, id))]
    }

    /// Marks each partition, then the queue (`EMQ.SPAN`), on their primaries, as the admin.
    pub fn span(&self, nodes: &[Node]) -> Result<(), String> {
        let map = slot_map(nodes).ok_or("no node gives the slot map")?;
        let marks = self.partitions.iter().enumerate().map(|(i, (p, s))| {
            let mut cmd = redis::cmd("EMQ.SPAN");
            cmd.arg(p).arg(WIDTH).arg("OF").arg(&self.queue);
            (cmd.arg("INDEX").arg(i).clone(), *s)
        });
        let mut queue = redis::cmd("EMQ.SPAN");
        queue.arg(&self.queue).arg(WIDTH);
        for (cmd, s) in marks.chain([(queue, self.slot)]) {
            let ip = owner(&map, s).ok_or("a partition's slot has no owner")?;
            let mut con = connect(ip, Duration::from_secs(5)).map_err(|e| e.to_string())?;
            cmd.query::<redis::Value>(&mut con)
                .map_err(|e| format!("{}: {e}", self.queue))?;
        }
        Ok(())
    }
}

/// The partitions' final states, in order, as the queue's one: their rows and memberships
/// together. A row in a partition its id does not route to, or in two partitions, and a set's
/// member without its row in the same partition, are violations (the merge keeps the first).
pub fn merge(queue: &str, parts: Vec<QueueState>) -> (QueueState, Vec<String>) {
    let mut whole = QueueState::default();
    let mut violations = Vec::new();
    for (index, part) in parts.into_iter().enumerate() {
        whole.outbox += part.outbox;
        let own: HashSet<String> = part.rows.keys().cloned().collect();
        for (id, row) in part.rows {
            let routed = usize::from(route(WIDTH, &id));
            if routed != index {
                violations.push(format!(
                    "{queue}/{id}: in partition {index}, but its id routes to partition {routed}"
                ));
            }
            if whole.rows.contains_key(&id) {
                violations.push(format!("{queue}/{id}: a row in two partitions"));
                continue;
            }
            whole.rows.insert(id, row);
        }
        for (id, sets) in part.members {
            // A member stands beside its own row, in the partition its id routes to.
            if !own.contains(&id) {
                violations.push(format!(
                    "{queue}/{id}: a member of {sets:?} in partition {index}, without its row there"
                ));
            } else if usize::from(route(WIDTH, &id)) != index {
                violations.push(format!(
                    "{queue}/{id}: a member of {sets:?} in partition {index}, but its id routes elsewhere"
                ));
            }
            whole.members.entry(id).or_default().extend(sets);
        }
    }
    (whole, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Row;

    fn holding(ids: &[&str]) -> QueueState {
        let mut q = QueueState::default();
        for id in ids {
            q.rows.insert(
                id.to_string(),
                Row {
                    state: "done".into(),
                    payload: format!("p-{id}"),
                    attempts: 1,
                },
            );
        }
        q
    }

    /// Ids that route to each partition, minted until each has two.
    fn routed() -> Vec<Vec<String>> {
        let mut by = vec![Vec::new(); usize::from(WIDTH)];
        while by.iter().any(|v: &Vec<String>| v.len() < 2) {
            let id = echomq_client::ids::mint();
            by[usize::from(route(WIDTH, &id))].push(id);
        }
        by
    }

    fn parts(ids: &[Vec<&str>]) -> Vec<QueueState> {
        ids.iter().map(|i| holding(i)).collect()
    }

    #[test]
    fn partitions_holding_their_own_ids_merge_into_one_queue_without_a_violation() {
        let by = routed();
        let ids: Vec<Vec<&str>> = by.iter().map(|v| vec![v[0].as_str()]).collect();
        let (whole, violations) = merge("q", parts(&ids));
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(whole.rows.len(), usize::from(WIDTH));
    }

    #[test]
    fn a_row_in_a_partition_its_id_does_not_route_to_is_a_violation() {
        let by = routed();
        let mut ids: Vec<Vec<&str>> = vec![Vec::new(); usize::from(WIDTH)];
        ids[0].push(by[1][0].as_str());
        let (whole, violations) = merge("q", parts(&ids));
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("routes to partition 1"));
        assert_eq!(whole.rows.len(), 1);
    }

    #[test]
    fn an_id_in_two_partitions_is_a_violation() {
        let by = routed();
        let mut ids: Vec<Vec<&str>> = vec![Vec::new(); usize::from(WIDTH)];
        ids[2].push(by[2][0].as_str());
        ids[3].push(by[2][0].as_str());
        let (whole, violations) = merge("q", parts(&ids));
        assert!(violations
            .iter()
            .any(|v| v.contains("a row in two partitions")));
        assert_eq!(whole.rows.len(), 1);
    }

    #[test]
    fn a_member_without_its_row_in_its_partition_is_a_violation() {
        let by = routed();
        let mut parts = parts(&vec![Vec::new(); usize::from(WIDTH)]);
        let id = by[3][0].clone();
        parts[3] = holding(&[id.as_str()]);
        parts[7].members.insert(id.clone(), vec!["dead".into()]);
        let (whole, violations) = merge("q", parts);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].contains("without its row there"));
        assert_eq!(whole.members[&id], vec!["dead".to_string()]);
    }

    #[test]
    fn the_partitions_are_the_modules_and_an_id_goes_where_it_routes() {
        let s = Spanned::new("orders").expect("a queue name");
        assert_eq!(s.partitions.len(), usize::from(WIDTH));
        assert_eq!(
            s.partitions[5].0,
            name("orders", 5, WIDTH).unwrap_or_default()
        );
        assert!(s.partitions.iter().all(|(p, sl)| slot(p) == *sl));
        let id = echomq_client::ids::mint();
        assert_eq!(
            s.partition_of(&id).0,
            s.partitions[usize::from(route(WIDTH, &id))].0
        );
    }
}
