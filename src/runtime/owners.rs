//! Which primary serves each slot, as the last `CLUSTER NODES` reading (`cluster::reconcile`,
//! once a second) showed it: a blocked claim's `WAKE` names only queues this node serves, and
//! one that names another's is redirected there at once.

use std::sync::Mutex;

use crate::protocol::slot::SLOTS;

/// Each primary's slot ranges, inclusive, in slot order, with its address and whether it is
/// this node; empty until the first reading (and outside a cluster).
static OWNERS: Mutex<Vec<Range>> = Mutex::new(Vec::new());

#[derive(Clone, Debug, PartialEq, Eq)]
struct Range {
    first: u16,
    last: u16,
    addr: String,
    myself: bool,
}

/// Takes a `CLUSTER NODES` reading.
pub fn read(nodes: &str) {
    let mut ranges = parse(nodes);
    ranges.sort_by_key(|r| r.first);
    *OWNERS.lock().unwrap_or_else(|p| p.into_inner()) = ranges;
}

/// Forgets the reading (module load and unload).
pub fn clear() {
    OWNERS.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// The address (`ip:port`) of the primary that serves `slot`, when the last reading showed
/// one other than this node; `None` when this node serves it, or nothing is known.
pub fn elsewhere(slot: u16) -> Option<String> {
    let owners = OWNERS.lock().unwrap_or_else(|p| p.into_inner());
    // The last range starting at or below the slot, by binary search (a resharded cluster's
    // map may hold many ranges, and a claim asks for each of its `WAKE` queues).
    let at = owners.partition_point(|r| r.first <= slot);
    owners[..at]
        .last()
        .filter(|r| slot <= r.last && !r.myself)
        .map(|r| r.addr.clone())
}

/// The primaries' slot ranges of a `CLUSTER NODES` reply: `<id> <ip:port@cport[,host]>
/// <flags> <primary> <ping> <pong> <epoch> <link> <slot or range> ...` (a `[...]` field is a
/// slot in migration, left out).
fn parse(nodes: &str) -> Vec<Range> {
    let mut ranges = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master") {
            continue;
        }
        let addr = addr
            .split(['@', ','])
            .next()
            .unwrap_or_default()
            .to_string();
        let myself = flags.contains(&"myself");
        for field in fields.iter().skip(8).filter(|f| !f.starts_with('[')) {
            let mut ends = field.splitn(2, '-').map(|s| s.parse::<u16>().ok());
            let (Some(Some(first)), last) = (ends.next(), ends.next()) else {
                continue;
            };
            let last = match last {
                Some(Some(last)) => last,
                Some(None) => continue,
                None => first,
            };
            if first <= last && last < SLOTS {
                ranges.push(Range {
                    first,
                    last,
                    addr: addr.clone(),
                    myself,
                });
            }
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_primary_s_ranges_and_address() {
        let nodes = "a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [105->-b2]\n\
                     b2 127.0.0.1:7002@17002,host master - 0 0 2 connected 5461-10921 10922\n\
                     c3 127.0.0.1:7003@17003 slave b2 0 0 2 connected\n";
        let ranges = parse(nodes);
        assert_eq!(ranges.len(), 3);
        assert_eq!(ranges[0].addr, "127.0.0.1:7001");
        assert!(ranges[0].myself && !ranges[1].myself);
        assert_eq!((ranges[2].first, ranges[2].last), (10922, 10922));
        read(nodes);
        assert_eq!(elsewhere(105), None);
        assert_eq!(elsewhere(10922).as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(elsewhere(16000), None, "a slot no one serves");
        clear();
        assert_eq!(elsewhere(10922), None, "nothing known");
    }
}
