//! The harness's containers: a docker network of its own, six EchoMQ nodes on it with their own
//! addresses, and the faults done to them. Partitions, packet loss and packet delay are made
//! inside a node's network namespace with the host's `iptables` (`nsenter`), so the image needs
//! nothing more than valkey. Delay goes through an NFQUEUE to the harness's own loop
//! ([`crate::delay`]), since this kernel has no `sch_netem` for `tc netem`. Each node's `/data`
//! is a small filesystem of its own (a loop-mounted file), which the harness fills from the
//! host. Everything is removed when the [`Net`] is dropped.

use std::borrow::Cow;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Each node's data filesystem, in MB: room for a phase's AOF and its rewrite.
const DISK_MB: u64 = 256;

/// What a docker or nsenter command said, or why it failed.
pub fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn docker(args: &[&str]) -> Result<String, String> {
    run("docker", args)
}

/// One node: its container and address.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub ip: String,
    pub index: usize,
}

/// The harness's network and its nodes.
pub struct Net {
    pub name: String,
    pub nodes: Vec<Node>,
    /// On the host: each node's data filesystem's image and mount point.
    dir: PathBuf,
    mounted: Vec<PathBuf>,
}

pub const PORT: u16 = 6379;

/// A user of the cluster's ACL. The default user is off: every client names itself.
pub struct User {
    pub name: Cow<'static, str>,
    pub password: &'static str,
}

/// The harness itself: forming the cluster, the slot map, the checks, replication.
pub const ADMIN: User = User {
    name: Cow::Borrowed("chaos-admin"),
    password: "admin-secret",
};

/// What a client of the run is: each role has a user of its own for every queue of the run,
/// `<role>-<queue>`, that may touch that queue's keys (`~emq:{<queue>}:*`) and no other.
pub struct Role {
    name: &'static str,
    password: &'static str,
    /// The rules after `on >password`, before the queue's key pattern.
    rules: &'static [&'static str],
}

impl Role {
    /// The role's user for `queue`.
    pub fn user(&self, queue: &str) -> User {
        User {
            name: Cow::Owned(format!("{}-{queue}", self.name)),
            password: self.password,
        }
    }
}

/// The producers: enqueue on their queue, and WAIT; nothing else.
pub const PRODUCER: Role = Role {
    name: "chaos-producer",
    password: "producer-secret",
    rules: &[
        "resetkeys",
        "resetchannels",
        "-@all",
        "+emq.enqueue",
        "+wait",
        "+ping",
    ],
};
/// The flows' producers: a user for each phase, `chaos-flows-<its first queue>`, that may
/// enqueue parents and children and adopt children on the phase's flow queues (see
/// [`acl_args`]), and WAIT; nothing else.
pub const FLOWS: Role = Role {
    name: "chaos-flows",
    password: "flows-secret",
    rules: &[
        "resetkeys",
        "resetchannels",
        "-@all",
        "+emq.enqueue",
        "+emq.adopt",
        "+wait",
        "+ping",
    ],
};
/// The workers: claim and settle on their queue, deliver their queue's flow hand-overs (the
/// outbox sweep every shipped worker runs), and WAIT; they cannot enqueue. Then what the
/// shipped workers' cluster clients send besides: `EMQ.VERSION` and `EMQ.WIDTH` (whether the
/// queue is a partitioned one) at start, the slot map
/// (`CLUSTER SLOTS`; node-redis reads `CLUSTER NODES`), `ASKING` (each follows a slot's
/// migration so), redis-py's command table (`COMMAND`), and the library's name on each
/// connection (`CLIENT SETINFO`: both clients ignore its refusal, which the ACL log showed).
pub const WORKER: Role = Role {
    name: "chaos-worker",
    password: "worker-secret",
    rules: &[
        "resetkeys",
        "resetchannels",
        "-@all",
        "+emq.claim",
        "+emq.ack",
        "+emq.mack",
        "+emq.fail",
        "+emq.renew",
        "+emq.outbox",
        "+emq.handover",
        "+emq.delivered",
        "+wait",
        "+ping",
        "+emq.version",
        "+emq.width",
        "+cluster|slots",
        "+cluster|nodes",
        "+asking",
        "+command",
        "+client|setinfo",
    ],
};

/// The key pattern of a queue's keys: `emq:{<queue>}:*`, its name's glob characters escaped.
pub fn queue_keys(queue: &str) -> String {
    let mut escaped = String::with_capacity(queue.len());
    for c in queue.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    format!("emq:{{{escaped}}}:*")
}

/// The key patterns of a partitioned queue's partitions ([`crate::spanned::WIDTH`] of them),
/// one a partition: none matches another queue's keys.
pub fn partition_keys(queue: &str) -> Vec<String> {
    crate::spanned::Spanned::new(queue)
        .map(|s| s.partitions.iter().map(|(p, _)| queue_keys(p)).collect())
        .unwrap_or_default()
}

/// The `--user` arguments that give a node its ACL at every start (a restarted node keeps
/// it), and the replication user a replica authenticates as: the admin, and a producer and a
/// worker for each of `queues`, each limited to its queue's keys; for each group of flow
/// queues (a phase's), a flows user on the group's keys, and for each worker of the group a
/// selector that lets it hand over (`EMQ.HANDOVER`) to the group's other queues and do nothing
/// else there: its children's parents are in them. A user of one of `spanned` may touch its
/// partitions' keys too.
fn acl_args(queues: &[String], spanned: &[String], flow_groups: &[Vec<String>]) -> Vec<String> {
    // Off, so no client connects without a user, but with its permissions: Valkey 8.0 replays
    // the AOF as the default user and checks each EXEC against its rules (valkey-io/valkey#3983),
    // and a restarted node would drop every transaction of EchoMQ's effects.
    let mut args: Vec<String> = ["--user", "default", "off", "~*", "&*", "+@all"]
        .map(String::from)
        .to_vec();
    let user = |name: &str, password: &str| {
        ["--user", name, "on"]
            .map(String::from)
            .into_iter()
            .chain([format!(">{password}")])
    };
    args.extend(user(&ADMIN.name, ADMIN.password));
    args.extend(["~*", "&*", "+@all"].map(String::from));
    for role in [&PRODUCER, &WORKER] {
        for queue in queues {
            args.extend(user(&role.user(queue).name, role.password));
            args.extend(role.rules.iter().map(|r| r.to_string()));
            args.push(format!("~{}", queue_keys(queue)));
            if spanned.contains(queue) {
                args.extend(partition_keys(queue).iter().map(|k| format!("~{k}")));
            }
            let parents: Vec<String> = flow_groups
                .iter()
                .filter(|g| role.name == WORKER.name && g.contains(queue))
                .flatten()
                .filter(|q| *q != queue)
                .map(|q| format!("~{}", queue_keys(q)))
                .collect();
            if !parents.is_empty() {
                args.push(format!("(+emq.handover {})", parents.join(" ")));
            }
        }
    }
    for group in flow_groups {
        let Some(first) = group.first() else { continue };
        args.extend(user(&FLOWS.user(first).name, FLOWS.password));
        args.extend(FLOWS.rules.iter().map(|r| r.to_string()));
        args.extend(group.iter().map(|q| format!("~{}", queue_keys(q))));
    }
    args.extend(["--masteruser", &*ADMIN.name, "--masterauth", ADMIN.password].map(String::from));
    args
}

/// Where a node finds the clock shim (bind-mounted from the host).
const SHIM_IN_NODE: &str = "/usr/lib/echomq/clock-shift-shim.so";

/// The clock shim built on the host (`make chaos` builds it): `ECHOMQ_CLOCK_SHIM`, or
/// `target/shims/clock-shift-shim.so` under the working directory.
fn clock_shim() -> Result<PathBuf, String> {
    let path = std::env::var_os("ECHOMQ_CLOCK_SHIM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/shims/clock-shift-shim.so"));
    let path = std::fs::canonicalize(&path).map_err(|e| {
        format!(
            "the clock shim {} ({e}): build it with cc -shared -fPIC -O2 -o {} scripts/clock-shift-shim.c (make chaos does)",
            path.display(),
            path.display()
        )
    })?;
    Ok(path)
}

impl Net {
    /// Creates the network (a /24 of 10.231.x.0 no other network uses) and starts `n` nodes
    /// of `image` on it, cluster-enabled with `node_timeout_ms`, their producers and workers
    /// limited to `queues` (and the partitions of those of them `spanned`), and the flows' to
    /// each of `flow_groups`.
    pub fn start(
        image: &str,
        n: usize,
        node_timeout_ms: u64,
        queues: &[String],
        spanned: &[String],
        flow_groups: &[Vec<String>],
    ) -> Result<Net, String> {
        let name = format!("emq-chaos-{}", std::process::id());
        let mut subnet = None;
        for i in 0..40 {
            let third = (std::process::id() as usize + i * 7) % 200 + 20;
            let candidate = format!("10.231.{third}");
            let created = docker(&[
                "network",
                "create",
                "--subnet",
                &format!("{candidate}.0/24"),
                &name,
            ]);
            if created.is_ok() {
                subnet = Some(candidate);
                break;
            }
        }
        let subnet = subnet.ok_or("no free subnet for the harness's network")?;
        let dir = std::env::temp_dir().join(&name);
        let mut net = Net {
            name,
            nodes: Vec::new(),
            dir,
            mounted: Vec::new(),
        };
        for i in 0..n {
            let node = Node {
                name: format!("{}-{i}", net.name),
                ip: format!("{subnet}.{}", 10 + i),
                index: i,
            };
            let data = net.disk(i)?;
            let data_mount = format!("{}:/data", data.display());
            let clock = net.clock_dir(&node)?;
            let clock_mount = format!("{}:/clock", clock.display());
            let shim_mount = format!("{}:{SHIM_IN_NODE}:ro", clock_shim()?.display());
            let timeout = node_timeout_ms.to_string();
            let node_id = i.to_string();
            let acl = acl_args(queues, spanned, flow_groups);
            let mut args = vec![
                "run",
                "-d",
                "--name",
                &node.name,
                "--network",
                &net.name,
                "--ip",
                &node.ip,
                "-v",
                &data_mount,
                // Every node's wall clock can be stepped (`Net::set_clock`).
                "-v",
                &clock_mount,
                "-v",
                &shim_mount,
                "-e",
                concat!("LD_PRELOAD=", "/usr/lib/echomq/clock-shift-shim.so"),
                "-e",
                "ECHOMQ_CLOCK_FILE=/clock/offset",
                image,
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                &timeout,
                "--enable-debug-command",
                "yes",
                "--emq.node-id",
                &node_id,
            ];
            args.extend(acl.iter().map(String::as_str));
            docker(&args)?;
            net.nodes.push(node);
        }
        Ok(net)
    }

    /// Node `node`'s clock folder, mounted at `/clock` in it: `offset` holds how many
    /// milliseconds its wall clock is off the real one (0 to start with).
    fn clock_dir(&self, node: &Node) -> Result<PathBuf, String> {
        let dir = self.dir.join(format!("clock-{}", node.index));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::fs::write(dir.join("offset"), "0").map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// Steps `node`'s wall clock to `offset_ms` off the real one: its server reads the clock
    /// through scripts/clock-shift-shim.c, which rereads the file every 20 ms.
    pub fn set_clock(&self, node: &Node, offset_ms: i64) -> Result<(), String> {
        let file = self
            .dir
            .join(format!("clock-{}", node.index))
            .join("offset");
        std::fs::write(&file, offset_ms.to_string()).map_err(|e| format!("{}: {e}", file.display()))
    }

    /// Makes node `i`'s data filesystem (a sparse file, ext4 without reserved blocks, mounted
    /// on a loop device) and returns its mount point.
    fn disk(&mut self, i: usize) -> Result<PathBuf, String> {
        let image = self.dir.join(format!("disk-{i}.img"));
        let mount = self.dir.join(format!("data-{i}"));
        std::fs::create_dir_all(&mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        let (image_s, mount_s) = (image.display().to_string(), mount.display().to_string());
        run("truncate", &["-s", &format!("{DISK_MB}M"), &image_s])?;
        run("mkfs.ext4", &["-q", "-F", "-m", "0", &image_s])?;
        run("mount", &["-o", "loop", &image_s, &mount_s])?;
        self.mounted.push(mount.clone());
        Ok(mount)
    }

    /// Fills `node`'s data filesystem to the last byte; returns the filler's size in MB.
    pub fn fill_disk(&self, node: &Node) -> Result<u64, String> {
        let fill = self.dir.join(format!("data-{}", node.index)).join("fill");
        // dd stops at ENOSPC, which is what it is for here: 1 MB blocks first, then 4 KB ones
        // for what a last whole megabyte did not fill.
        for bs in ["bs=1M", "bs=4k"] {
            let _ = run(
                "dd",
                &[
                    "if=/dev/zero",
                    &format!("of={}", fill.display()),
                    bs,
                    "oflag=append",
                    "conv=notrunc",
                    "status=none",
                ],
            );
        }
        run("sync", &[])?;
        let size = std::fs::metadata(&fill).map_err(|e| format!("{}: {e}", fill.display()))?;
        Ok(size.len() >> 20)
    }

    /// Gives `node`'s data filesystem its room back.
    pub fn free_disk(&self, node: &Node) -> Result<(), String> {
        let fill = self.dir.join(format!("data-{}", node.index)).join("fill");
        std::fs::remove_file(&fill).map_err(|e| format!("{}: {e}", fill.display()))
    }

    /// The host pid of a node's server (its container's first process).
    fn pid(&self, node: &Node) -> Result<String, String> {
        docker(&["inspect", "-f", "{{.State.Pid}}", &node.name])
    }

    /// Runs `program args` inside the node's network namespace.
    fn in_netns(&self, node: &Node, program: &str, args: &[&str]) -> Result<String, String> {
        let pid = self.pid(node)?;
        let mut all = vec!["-t", pid.as_str(), "-n", program];
        all.extend_from_slice(args);
        run("nsenter", &all)
    }

    /// Drops everything between `node` and `others` (both ways, client and bus ports alike);
    /// the harness, on the network's gateway, still reaches it.
    pub fn cut(&self, node: &Node, others: &[Node]) -> Result<(), String> {
        for other in others {
            self.in_netns(
                node,
                "iptables",
                &["-A", "INPUT", "-s", &other.ip, "-j", "DROP"],
            )?;
            self.in_netns(
                node,
                "iptables",
                &["-A", "OUTPUT", "-d", &other.ip, "-j", "DROP"],
            )?;
        }
        Ok(())
    }

    /// Takes back every rule [`cut`](Self::cut) made on `node`.
    pub fn heal(&self, node: &Node) -> Result<(), String> {
        self.in_netns(node, "iptables", &["-F", "INPUT"])?;
        self.in_netns(node, "iptables", &["-F", "OUTPUT"])?;
        Ok(())
    }

    /// Slows every link of `node` (its network interface, both ways: the other nodes and the
    /// clients alike): a `loss` share (0–1) of its packets dropped, and the rest held `ms` ±
    /// `jitter_ms` each way by [`crate::delay`], run inside its network namespace. Undone by
    /// [`Slow::heal`].
    pub fn slow(
        &self,
        node: &Node,
        ms: u64,
        jitter_ms: u64,
        loss: f64,
        seed: u64,
    ) -> Result<Slow, String> {
        let pid = self.pid(node)?;
        let exe = std::env::current_exe().map_err(|e| format!("emq-chaos itself: {e}"))?;
        let helper = Command::new("nsenter")
            .args(["-t", pid.as_str(), "-n"])
            .arg(exe)
            .args([
                "delay",
                &ms.to_string(),
                &jitter_ms.to_string(),
                &seed.to_string(),
            ])
            .spawn()
            .map_err(|e| format!("nsenter: {e}"))?;
        let slow = Slow {
            node: node.clone(),
            helper,
            drain: Duration::from_millis(2 * (ms + jitter_ms)),
        };
        // The loop binds its queue before the packets go to it (until then they bypass it).
        std::thread::sleep(Duration::from_millis(300));
        let queue = crate::delay::QUEUE.to_string();
        let p = loss.to_string();
        for (chain, dir) in [("INPUT", "-i"), ("OUTPUT", "-o")] {
            let lose = [
                "-A",
                chain,
                dir,
                "eth0",
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ];
            let hold = [
                "-A",
                chain,
                dir,
                "eth0",
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue,
                "--queue-bypass",
            ];
            self.in_netns(node, "iptables", &lose)?;
            self.in_netns(node, "iptables", &hold)?;
        }
        Ok(slow)
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`) to the node's server.
    pub fn signal(&self, node: &Node, signal: &str) -> Result<(), String> {
        docker(&["kill", "--signal", signal, &node.name]).map(|_| ())
    }

    /// Starts a stopped or killed node again (its data and `nodes.conf` kept).
    pub fn start_again(&self, node: &Node) -> Result<(), String> {
        docker(&["start", &node.name]).map(|_| ())
    }

    /// Restarts a node gracefully (`SIGTERM`, then a start).
    pub fn restart(&self, node: &Node) -> Result<(), String> {
        docker(&["restart", "-t", "10", &node.name]).map(|_| ())
    }

    /// Runs `valkey-cli args` inside the first node's container, as the harness's user.
    pub fn cli(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec![
            "exec",
            self.nodes[0].name.as_str(),
            "valkey-cli",
            "--user",
            &*ADMIN.name,
            "--pass",
            ADMIN.password,
            "--no-auth-warning",
        ];
        all.extend_from_slice(args);
        docker(&all)
    }
}

/// A node whose links [`Net::slow`] slowed: its delay loop.
pub struct Slow {
    node: Node,
    helper: std::process::Child,
    /// How long the packets still held may take to leave.
    drain: Duration,
}

impl Slow {
    /// Whether the delay loop still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.helper.try_wait(), Ok(None))
    }

    /// Takes the node's rules away, lets the packets still held leave, then stops the loop.
    pub fn heal(mut self, net: &Net) -> Result<(), String> {
        let healed = net.heal(&self.node);
        std::thread::sleep(self.drain);
        let _ = self.helper.kill();
        let _ = self.helper.wait();
        healed
    }
}

impl Drop for Slow {
    fn drop(&mut self) {
        let _ = self.helper.kill();
        let _ = self.helper.wait();
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for node in &self.nodes {
            let _ = docker(&["rm", "-f", "-v", &node.name]);
        }
        let _ = docker(&["network", "rm", &self.name]);
        std::thread::sleep(Duration::from_millis(100));
        for mount in &self.mounted {
            let _ = run("umount", &[&mount.display().to_string()]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitioned_queues_users_reach_its_partitions_keys_and_only_theirs() {
        assert_eq!(queue_keys("f1-s7"), "emq:{f1-s7}:*");
        let keys = partition_keys("f1-s7");
        assert_eq!(keys.len(), usize::from(crate::spanned::WIDTH));
        let first = echomq_client::partition::name("f1-s7", 0, crate::spanned::WIDTH);
        assert_eq!(keys[0], format!("emq:{{{}}}:*", first.unwrap_or_default()));
        assert!(keys
            .iter()
            .all(|k| !k.contains('~') || k.contains("~0-") || k.contains('-')));
        let acl = acl_args(&["p".into(), "q".into()], &["p".into()], &[]);
        let granted = |k: &String| acl.iter().filter(|a| **a == format!("~{k}")).count();
        assert!(
            partition_keys("p").iter().all(|k| granted(k) == 2),
            "producer and worker"
        );
        assert!(!acl.iter().any(|a| a.contains("{q~")));
    }
}
