//! The queues of each fault's phase, drawn from the run's seed before the cluster exists (the
//! nodes' ACL names them at start): four queues, three of them, the flow queues, each in the
//! slots of another primary of the cluster as it is formed, and how many flows a phase builds;
//! and a fifth, partitioned, queue.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The seed of fault `index`'s phase.
pub fn phase_seed(seed: u64, index: usize) -> u64 {
    seed.wrapping_mul(1_000).wrapping_add(index as u64)
}

/// Which primary of the cluster as formed owns `slot`: `--cluster create` gives three
/// primaries 0–5460, 5461–10922 and 10923–16383, and a failover moves a range whole.
fn third(slot: u16) -> usize {
    match slot {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    }
}

/// The four queues of fault `index`'s phase, drawn from its seed: the busy one (the fault's
/// primary owns it), the limited one, and two more drawn until each is in one of the two
/// thirds of the slots the busy one is not in, so the flow queues (the first, third and fourth)
/// have a primary each.
pub fn names(seed: u64, index: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(phase_seed(seed, index));
    let mut draw = |q: u32| format!("f{index}-{}", rng.random_range(0..1_000_000u32) + q);
    let (busy, limited) = (draw(0), draw(1));
    let busy_third = third(echomq_client::slot::slot(&busy));
    let mut names = vec![busy, limited];
    for t in (0..3).filter(|t| *t != busy_third) {
        let name = std::iter::repeat_with(|| draw(names.len() as u32))
            .find(|n| third(echomq_client::slot::slot(n)) == t)
            .unwrap_or_default();
        names.push(name);
    }
    names
}

/// The partitioned queue of fault `index`'s phase ([`crate::spanned`]), drawn from its seed
/// apart from the four, which it leaves as they were.
pub fn spanned(seed: u64, index: usize) -> String {
    let mut rng = StdRng::seed_from_u64(phase_seed(seed, index) ^ 0x5a5a);
    format!("f{index}-s{}", rng.random_range(0..1_000_000u32))
}

/// The flow queues of a phase among its four: the busy one and the two on the other primaries.
pub const FLOW_QUEUES: [usize; 3] = [0, 2, 3];

/// The limited queue of a phase among its four, whose jobs are enqueued in [`GROUPS`] groups.
pub const LIMITED: usize = 1;
/// The groups of the limited queue's jobs, drawn for each enqueue: `g0` to `g3`.
pub const GROUPS: usize = 4;
/// Each group's concurrency limit (`GROUP-CONCURRENCY`), and `g0`'s own, lower one.
pub const GROUP_CONCURRENCY: i64 = 2;
pub const G0_CONCURRENCY: i64 = 1;

/// The flow queues of fault `index`'s phase.
pub fn flow_group(seed: u64, index: usize) -> Vec<String> {
    let names = names(seed, index);
    FLOW_QUEUES.iter().map(|q| names[*q].clone()).collect()
}

/// Flows built per fault: one for every 15 enqueues tried.
pub fn flows_of(jobs: usize) -> usize {
    (jobs / 15).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phases_flow_queues_are_in_three_primaries_slots_and_the_busy_queue_is_one() {
        for seed in [1, 2, 3, 77] {
            for index in 0..10 {
                let names = names(seed, index);
                let group = flow_group(seed, index);
                assert_eq!(group[0], names[0]);
                let mut thirds: Vec<usize> = group
                    .iter()
                    .map(|q| third(echomq_client::slot::slot(q)))
                    .collect();
                thirds.sort();
                assert_eq!(thirds, [0, 1, 2], "{group:?}");
                assert_eq!(
                    names,
                    super::names(seed, index),
                    "drawn from the seed alone"
                );
            }
        }
        assert_eq!(
            (third(5460), third(5461), third(10922), third(10923)),
            (0, 1, 1, 2)
        );
    }
}
