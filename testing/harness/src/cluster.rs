//! A real local Valkey Cluster: primaries and replicas as `valkey-server` processes with the
//! module, on loopback ports, created with `valkey-cli --cluster create`, torn down on drop.

use std::process::Command;
use std::time::Duration;

use redis::{cmd, Connection, Value};

use super::{free_port, info_field, wait_until, Options, Server};

pub struct Cluster {
    pub nodes: Vec<Server>,
}

pub fn cli_binary() -> String {
    std::env::var("VALKEY_CLI").unwrap_or_else(|_| "valkey-cli".to_string())
}

/// One node as `CLUSTER SHARDS`/`NODES` describe it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub slots: Vec<(u16, u16)>,
}

impl Cluster {
    /// `primaries` primaries with `replicas` replicas each, every node with the module.
    pub fn start(primaries: usize, replicas: usize) -> Cluster {
        Cluster::start_with(primaries, replicas, &[])
    }

    /// As [`Cluster::start`], every node with the settings `extra` too.
    pub fn start_with(primaries: usize, replicas: usize, extra: &[(&str, &str)]) -> Cluster {
        let nodes: Vec<Server> = (0..primaries * (1 + replicas))
            .map(|_| {
                let options = Options::default()
                    .arg("cluster-enabled", "yes")
                    .arg("cluster-config-file", "nodes.conf")
                    .arg("cluster-port", &free_port().to_string())
                    .arg("cluster-node-timeout", "2000")
                    .arg("repl-diskless-sync-delay", "0")
                    .arg("enable-debug-command", "local")
                    .arg("appendonly", "no");
                Server::start(
                    extra
                        .iter()
                        .fold(options, |options, (name, value)| options.arg(name, value)),
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(cli_binary())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run valkey-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        cluster.wait_healthy(primaries * (1 + replicas));
        cluster
    }

    /// Waits (bounded) until every live node says `cluster_state:ok` and knows every node.
    pub fn wait_healthy(&self, known: usize) {
        let ok = wait_until(Duration::from_secs(60), || {
            self.nodes.iter().filter(|n| n.pid().is_some()).all(|n| {
                let Ok(mut c) = std::panic::catch_unwind(|| n.conn()) else {
                    return false;
                };
                let info: String = cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
                let field = |name: &str| {
                    info.lines().find_map(|l| {
                        l.strip_prefix(&format!("{name}:"))
                            .map(|v| v.trim().to_string())
                    })
                };
                field("cluster_state").as_deref() == Some("ok")
                    && field("cluster_known_nodes")
                        .and_then(|v| v.parse::<usize>().ok())
                        .is_some_and(|k| k >= known)
            })
        });
        assert!(ok, "the cluster did not become healthy");
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.pid().is_some())
            .map(Server::url)
            .collect()
    }

    pub fn client(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls())
            .expect("cluster client")
            .get_connection()
            .expect("cluster connection")
    }

    pub fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// The topology as one live node sees it (`CLUSTER NODES`).
    pub fn topology(&self) -> Vec<NodeInfo> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.is_alive())
            .expect("a live node");
        let text: String = cmd("CLUSTER")
            .arg("NODES")
            .query(&mut live.conn())
            .expect("CLUSTER NODES");
        text.lines()
            .filter(|l| !l.contains("fail") && !l.contains("noaddr"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                let primary = f.get(2)?.contains("master");
                let slots = f
                    .iter()
                    .skip(8)
                    .filter(|s| !s.starts_with('['))
                    .filter_map(|s| {
                        let mut r = s.split('-');
                        let a: u16 = r.next()?.parse().ok()?;
                        let b: u16 = r.next().map_or(Some(a), |b| b.parse().ok())?;
                        Some((a, b))
                    })
                    .collect();
                Some(NodeInfo {
                    id: f[0].to_string(),
                    port,
                    primary,
                    slots,
                })
            })
            .collect()
    }

    /// The port of a live replica of the primary at `port` (its `master_port`).
    pub fn replica_of(&self, port: u16) -> u16 {
        self.nodes
            .iter()
            .filter(|n| n.is_alive())
            .map(|n| n.port)
            .find(|&p| {
                info_field(&mut self.node(p).conn(), "replication", "master_port")
                    == Some(port.to_string())
            })
            .unwrap_or_else(|| panic!("a replica of the primary at {port}"))
    }

    /// The primary that owns `slot`.
    pub fn owner(&self, slot: u16) -> NodeInfo {
        self.try_owner(slot).expect("an owner for every slot")
    }

    /// The primary that owns `slot`, if the node asked shows one (during a failover it may
    /// show none for a moment).
    pub fn try_owner(&self, slot: u16) -> Option<NodeInfo> {
        self.topology()
            .into_iter()
            .find(|n| n.primary && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
    }

    /// A primary other than `node`.
    pub fn another_primary(&self, node: &NodeInfo) -> NodeInfo {
        self.topology()
            .into_iter()
            .find(|n| n.primary && n.port != node.port)
            .expect("another primary")
    }

    /// Moves `slot` from the primary `from` to the primary `to` as an operator would:
    /// `IMPORTING` on `to`, `MIGRATING` on `from`, its keys over in `MIGRATE` batches of 50
    /// (calling `between` after each batch), then `NODE` on every primary. Returns how many
    /// keys moved; a batch that collides (a key already on `to`) fails the test with `to`'s
    /// log lines about slots.
    pub fn move_slot(
        &self,
        slot: u16,
        from: &NodeInfo,
        to: &NodeInfo,
        mut between: impl FnMut(),
    ) -> usize {
        let mut src = self.node(from.port).conn();
        let mut dst = self.node(to.port).conn();
        let setslot = |con: &mut Connection, how: &str, id: &str| {
            let _: () = cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query(con)
                .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how}: {e}"));
        };
        setslot(&mut dst, "IMPORTING", &from.id);
        setslot(&mut src, "MIGRATING", &to.id);
        let mut moved = 0;
        loop {
            let keys: Vec<String> = cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(50)
                .query(&mut src)
                .expect("keys");
            if keys.is_empty() {
                break;
            }
            let mut m = cmd("MIGRATE");
            m.arg("127.0.0.1")
                .arg(to.port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS");
            for k in &keys {
                m.arg(k);
            }
            if let Err(e) = m.query::<Value>(&mut src) {
                // A collision means a write reached the importing node before the keys did.
                let log = self.node(to.port).log();
                let slot_lines: Vec<&str> = log.lines().filter(|l| l.contains("slot")).collect();
                panic!(
                    "MIGRATE of {keys:?} collided: {e}\n{}",
                    slot_lines.join("\n")
                );
            }
            moved += keys.len();
            between();
        }
        for node in self.topology().iter().filter(|n| n.primary) {
            setslot(&mut self.node(node.port).conn(), "NODE", &to.id);
        }
        moved
    }

    /// Starts a killed node again with its data and cluster config.
    pub fn restart(&mut self, port: u16) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            n.restart(true);
        }
    }

    /// Kills one node at once (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            n.kill();
        }
    }
}

/// A minimal cluster client for fault tests: follows `MOVED` and `ASK`, retries `TRYAGAIN`,
/// `CLUSTERDOWN` and lost connections, and keeps one connection per node.
pub struct Router {
    ports: Vec<u16>,
    conns: std::collections::HashMap<u16, Connection>,
    /// Where each slot was last served.
    route: std::collections::HashMap<u16, u16>,
    /// Redirections and retries seen: MOVED, ASK, TRYAGAIN/CLUSTERDOWN, lost connections.
    pub moved: u64,
    pub asked: u64,
    pub retried: u64,
    pub reconnected: u64,
}

impl Router {
    pub fn new(ports: Vec<u16>) -> Router {
        Router {
            ports,
            conns: Default::default(),
            route: Default::default(),
            moved: 0,
            asked: 0,
            retried: 0,
            reconnected: 0,
        }
    }

    fn conn(&mut self, port: u16) -> redis::RedisResult<&mut Connection> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.conns.entry(port) {
            let con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?
                .get_connection_with_timeout(Duration::from_secs(1))?;
            con.set_read_timeout(Some(Duration::from_secs(5)))?;
            slot.insert(con);
        }
        Ok(self.conns.get_mut(&port).expect("present"))
    }

    /// Runs `c` for a key in `slot`, giving up after `attempts` tries.
    pub fn call(
        &mut self,
        slot: u16,
        c: &redis::Cmd,
        attempts: usize,
    ) -> redis::RedisResult<Value> {
        let mut port = *self.route.get(&slot).unwrap_or(&self.ports[0]);
        let mut asking = false;
        let mut last = None;
        for n in 0..attempts {
            let result = self.conn(port).and_then(|con| {
                if asking {
                    cmd("ASKING").query::<()>(con)?;
                }
                c.query::<Value>(con)
            });
            match result {
                Ok(v) => {
                    if !asking {
                        self.route.insert(slot, port);
                    }
                    return Ok(v);
                }
                Err(e) => {
                    let to = e
                        .redirect_node()
                        .and_then(|(addr, _)| addr.rsplit(':').next()?.parse::<u16>().ok());
                    asking = false;
                    match (e.code(), to) {
                        (Some("MOVED"), Some(p)) => {
                            self.moved += 1;
                            port = p;
                        }
                        (Some("ASK"), Some(p)) => {
                            self.asked += 1;
                            port = p;
                            asking = true;
                        }
                        (Some("TRYAGAIN"), _) | (Some("CLUSTERDOWN"), _) => {
                            self.retried += 1;
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        _ if e.is_io_error()
                            || e.is_connection_dropped()
                            || e.is_timeout()
                            || e.code() == Some("LOADING")
                            || e.code() == Some("READONLY") =>
                        {
                            self.reconnected += 1;
                            self.conns.remove(&port);
                            // Try the nodes in turn: one of them knows the new owner.
                            port = self.ports[n % self.ports.len()];
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        _ => return Err(e),
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| redis::RedisError::from((redis::ErrorKind::Io, "gave up"))))
    }
}
