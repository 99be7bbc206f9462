//! Talking to the cluster from the harness: connections to each node by address, the slot map
//! read from `CLUSTER SLOTS`, and waiting for the cluster to be whole and its replicas caught up.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::docker::{Net, Node, User, ADMIN, PORT};

/// The harness's connection to `ip` (as its admin user), with short timeouts, so a cut-off or
/// frozen node is an error soon.
pub fn connect(ip: &str, timeout: Duration) -> redis::RedisResult<Connection> {
    connect_as(ip, &ADMIN, timeout)
}

/// A connection to `ip` as `user`, with short timeouts.
pub fn connect_as(ip: &str, user: &User, timeout: Duration) -> redis::RedisResult<Connection> {
    let client = redis::Client::open(format!(
        "redis://{}:{}@{ip}:{PORT}/",
        user.name, user.password
    ))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// The cluster slot of `queue`'s keys, as the node at `ip` computes it.
pub fn slot_of(ip: &str, queue: &str) -> Result<u16, String> {
    let mut con = connect(ip, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("emq:{{{queue}}}:pending"))
        .query(&mut con)
        .map_err(|e| e.to_string())
}

/// Waits until `f` holds, polling every 100 ms, up to `timeout`.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// One field of an `INFO` or `CLUSTER INFO` text.
pub fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

fn text_of(con: &mut Connection, cmd: &mut redis::Cmd) -> Option<String> {
    cmd.query::<String>(con).ok()
}

/// The primaries by the slot ranges they own: `(first, last, ip)`.
pub type SlotMap = Vec<(u16, u16, String)>;

/// `CLUSTER SLOTS` as seen by the first node that answers.
pub fn slot_map(nodes: &[Node]) -> Option<SlotMap> {
    for node in nodes {
        let Ok(mut con) = connect(&node.ip, Duration::from_millis(500)) else {
            continue;
        };
        let Ok(ranges) = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<Value>>(&mut con)
        else {
            continue;
        };
        let mut map = SlotMap::new();
        for range in ranges {
            let Value::Array(items) = range else { continue };
            if let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(primary))) =
                (items.first(), items.get(1), items.get(2))
            {
                if let Some(Value::BulkString(ip)) = primary.first() {
                    map.push((
                        *a as u16,
                        *b as u16,
                        String::from_utf8_lossy(ip).into_owned(),
                    ));
                }
            }
        }
        if !map.is_empty() {
            return Some(map);
        }
    }
    None
}

/// The primary owning `slot` in `map`.
pub fn owner(map: &SlotMap, slot: u16) -> Option<&str> {
    map.iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, ip)| ip.as_str())
}

/// Forms the cluster: three primaries, a replica each.
pub fn create(net: &Net) -> Result<(), String> {
    let addrs: Vec<String> = net
        .nodes
        .iter()
        .map(|n| format!("{}:{PORT}", n.ip))
        .collect();
    let mut args = vec!["--cluster", "create"];
    args.extend(addrs.iter().map(String::as_str));
    args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
    net.cli(&args).map(|_| ())
}

/// Whether every node answers, says the cluster is ok, knows all the others and agrees on
/// three primaries with a replica each that is linked and caught up: at or past the offset its
/// primary had when read just before it (under load a primary moves on between the two reads,
/// so equal offsets would need a moment without a write).
pub fn stable(nodes: &[Node]) -> bool {
    let mut roles = Vec::with_capacity(nodes.len());
    for node in nodes {
        let Ok(mut con) = connect(&node.ip, Duration::from_millis(500)) else {
            return false;
        };
        let Some(info) = text_of(&mut con, redis::cmd("CLUSTER").arg("INFO")) else {
            return false;
        };
        if field(&info, "cluster_state").as_deref() != Some("ok")
            || field(&info, "cluster_known_nodes").as_deref() != Some(&nodes.len().to_string())
        {
            return false;
        }
        let Some(repl) = text_of(&mut con, redis::cmd("INFO").arg("replication")) else {
            return false;
        };
        roles.push((node, con, field(&repl, "role")));
    }
    // The primaries' offsets first, then each replica's against its primary's.
    let offset = |con: &mut redis::Connection| {
        let repl = text_of(con, redis::cmd("INFO").arg("replication"))?;
        Some((
            field(&repl, "master_repl_offset")?.parse::<i64>().ok()?,
            repl,
        ))
    };
    let mut offsets: HashMap<String, i64> = HashMap::new();
    for (node, con, role) in &mut roles {
        if role.as_deref() == Some("master") {
            let Some((at, _)) = offset(con) else {
                return false;
            };
            offsets.insert(node.ip.clone(), at);
        }
    }
    let mut replicas = 0;
    for (_, con, role) in &mut roles {
        match role.as_deref() {
            Some("master") => {}
            Some("slave") => {
                let Some((at, repl)) = offset(con) else {
                    return false;
                };
                let primary = field(&repl, "master_host").unwrap_or_default();
                let up = field(&repl, "master_link_status").as_deref() == Some("up");
                if !up || offsets.get(&primary).is_none_or(|&p| at < p) {
                    return false;
                }
                replicas += 1;
            }
            _ => return false,
        }
    }
    offsets.len() == nodes.len() / 2 && replicas == nodes.len() / 2
}

/// The primary and replica pairs: `(primary, replica)`.
pub fn pairs(nodes: &[Node]) -> Vec<(Node, Node)> {
    let mut out = Vec::new();
    for node in nodes {
        let Ok(mut con) = connect(&node.ip, Duration::from_millis(500)) else {
            continue;
        };
        let Some(repl) = text_of(&mut con, redis::cmd("INFO").arg("replication")) else {
            continue;
        };
        if field(&repl, "role").as_deref() == Some("slave") {
            let primary = field(&repl, "master_host").unwrap_or_default();
            if let Some(p) = nodes.iter().find(|n| n.ip == primary) {
                out.push((p.clone(), node.clone()));
            }
        }
    }
    out
}

/// The primaries that own slots now, by the slot map.
pub fn primaries(nodes: &[Node]) -> Option<Vec<Node>> {
    let map = slot_map(nodes)?;
    let mut out: Vec<Node> = Vec::new();
    for (_, _, ip) in &map {
        if !out.iter().any(|n| &n.ip == ip) {
            out.push(nodes.iter().find(|n| &n.ip == ip)?.clone());
        }
    }
    Some(out)
}

/// What `f` answers, retried every 200 ms while the cluster is down or the slot busy
/// (`CLUSTERDOWN`, `TRYAGAIN`, a lost connection), for up to a minute.
fn retried<T>(what: &str, mut f: impl FnMut() -> redis::RedisResult<T>) -> Result<T, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e)
                if Instant::now() < deadline
                    && (matches!(e.code(), Some("CLUSTERDOWN" | "TRYAGAIN" | "IOERR"))
                        || e.is_io_error()
                        || e.is_timeout()
                        || e.is_connection_dropped()) =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
}

fn my_id(node: &Node) -> Result<String, String> {
    retried("CLUSTER MYID", || {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut connect(&node.ip, Duration::from_secs(2))?)
    })
}

/// Moves `slot` from the primary `from` to the primary `to` as an operator would:
/// `IMPORTING` on `to`, `MIGRATING` on `from`, its keys over in `MIGRATE` batches of 100 (as
/// the harness's user, retried while the cluster is down), then `NODE` on `to`, `from` and
/// every other primary but `cut` (cut off: it learns the slot's owner from the others once
/// back). Returns how many keys moved.
pub fn move_slot(
    nodes: &[Node],
    slot: u16,
    from: &Node,
    to: &Node,
    cut: &Node,
) -> Result<usize, String> {
    let (from_id, to_id) = (my_id(from)?, my_id(to)?);
    let setslot = |node: &Node, how: &str, id: &str| {
        retried(
            &format!("CLUSTER SETSLOT {slot} {how} on {}", node.ip),
            || {
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(how)
                    .arg(id)
                    .query::<()>(&mut connect(&node.ip, Duration::from_secs(2))?)
            },
        )
    };
    setslot(to, "IMPORTING", &from_id)?;
    setslot(from, "MIGRATING", &to_id)?;
    let mut moved = 0;
    loop {
        let keys: Vec<String> = retried("CLUSTER GETKEYSINSLOT", || {
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut connect(&from.ip, Duration::from_secs(2))?)
        })?;
        if keys.is_empty() {
            break;
        }
        retried("MIGRATE", || {
            let mut m = redis::cmd("MIGRATE");
            m.arg(&to.ip)
                .arg(PORT)
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("AUTH2")
                .arg(ADMIN.name)
                .arg(ADMIN.password)
                .arg("KEYS")
                .arg(&keys);
            m.query::<Value>(&mut connect(&from.ip, Duration::from_secs(6))?)
        })?;
        moved += keys.len();
    }
    setslot(to, "NODE", &to_id)?;
    setslot(from, "NODE", &to_id)?;
    for node in primaries(nodes).unwrap_or_default() {
        if node.ip != from.ip && node.ip != to.ip && node.ip != cut.ip {
            setslot(&node, "NODE", &to_id)?;
        }
    }
    Ok(moved)
}

/// Whether the node's ACL is as the harness set it: no client without a user, no producer
/// or flows user that can claim, no worker that can enqueue (the users of `own`, one of the
/// run's queues, the first of a phase's flow queues), and, with `probe_other` (for the owner
/// of `other`'s slot, another of the run's queues, not a flow queue), no producer, flows user
/// or worker of `own` that can enqueue on or claim from `other`.
pub fn acl_holds(node: &Node, own: &str, other: &str, probe_other: bool) -> Result<(), String> {
    use crate::docker::{FLOWS, PRODUCER, WORKER};
    let timeout = Duration::from_millis(800);
    let refused = |user: Option<&User>, cmd: &mut redis::Cmd, code: &str| -> Result<(), String> {
        let url = match user {
            Some(u) => format!("redis://{}:{}@{}:{PORT}/", u.name, u.password, node.ip),
            None => format!("redis://{}:{PORT}/", node.ip),
        };
        let answer = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(timeout))
            .and_then(|mut con| cmd.query::<Value>(&mut con));
        match answer {
            Err(e) if e.code() == Some(code) => Ok(()),
            other => Err(format!(
                "{} on {}: expected {code}, got {other:?}",
                user.map_or("no user", |u| &*u.name),
                node.ip
            )),
        }
    };
    refused(None, &mut redis::cmd("PING"), "NOAUTH")?;
    refused(
        Some(&PRODUCER.user(own)),
        redis::cmd("EMQ.CLAIM").arg(own),
        "NOPERM",
    )?;
    refused(
        Some(&WORKER.user(own)),
        redis::cmd("EMQ.ENQUEUE").arg(own).arg("*").arg("x"),
        "NOPERM",
    )?;
    refused(
        Some(&FLOWS.user(own)),
        redis::cmd("EMQ.CLAIM").arg(own),
        "NOPERM",
    )?;
    if !probe_other {
        return Ok(());
    }
    // Another queue of the run, on the node that owns it (the others answer `MOVED` before a
    // handler sees it): its keys are its own users', not these.
    for user in [PRODUCER.user(own), FLOWS.user(own)] {
        refused(
            Some(&user),
            redis::cmd("EMQ.ENQUEUE").arg(other).arg("*").arg("x"),
            "NOPERM",
        )?;
    }
    refused(
        Some(&WORKER.user(own)),
        redis::cmd("EMQ.CLAIM").arg(other),
        "NOPERM",
    )
}
