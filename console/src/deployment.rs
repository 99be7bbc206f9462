//! The deployment `emq` looks at: one server, or a Valkey Cluster whose every primary it asks.
//! Queue commands go through one routed connection (a cluster routes `EMQ.* <queue>` by the
//! queue's name, the hashtag of all its keys); what each node holds on its own (its queues, its
//! `INFO emq` counters) is asked of every primary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use echomq_client::Queue;

use crate::error::{Error, Result};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{
    ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline,
    RedisFuture, TlsCertificates, Value,
};

/// Queue names one `EMQ.QUEUES` page asks for.
const QUEUES_PAGE: usize = 500;
/// The most queues `emq` lists: a console for people, bounded like every command.
pub const MAX_QUEUES: usize = 10_000;

/// A connection that reaches any queue: the server itself, or the cluster's router.
#[derive(Clone)]
pub enum Routed {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Routed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Routed::Single(c) => c.req_packed_command(cmd),
            Routed::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Routed::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Routed::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Routed::Single(c) => c.get_db(),
            Routed::Cluster(c) => c.get_db(),
        }
    }
}

/// One primary, by its address.
#[derive(Clone)]
pub struct Node {
    pub addr: String,
    pub conn: MultiplexedConnection,
}

/// The servers behind one `--url`.
#[derive(Clone)]
pub struct Deployment {
    pub routed: Routed,
    pub primaries: Vec<Node>,
    pub cluster: bool,
}

/// How a `rediss://` connection proves the server (and, with a certificate and key, itself):
/// PEM files; with none, the system's roots (or no check at all with the URL's `#insecure`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Tls {
    /// The CA certificate (PEM) that signed the server's, for rediss:// URLs.
    #[arg(long = "tls-ca", global = true, env = "ECHOMQ_TLS_CA")]
    pub ca: Option<PathBuf>,
    /// This client's certificate (PEM), when the server asks for one.
    #[arg(
        long = "tls-cert",
        global = true,
        env = "ECHOMQ_TLS_CERT",
        requires = "key"
    )]
    pub cert: Option<PathBuf>,
    /// This client's key (PEM).
    #[arg(
        long = "tls-key",
        global = true,
        env = "ECHOMQ_TLS_KEY",
        requires = "cert"
    )]
    pub key: Option<PathBuf>,
}

impl Tls {
    fn certificates(&self) -> Result<Option<TlsCertificates>> {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|e| Error::Usage(format!("{}: {e}", p.display())))
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            (None, None) => None,
            _ => return Err(Error::Usage("--tls-cert and --tls-key go together".into())),
        };
        let root_cert = self.ca.as_ref().map(read).transpose()?;
        if client_tls.is_none() && root_cert.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

fn client(info: ConnectionInfo, certs: &Option<TlsCertificates>) -> Result<redis::Client> {
    Ok(match certs {
        Some(c) => redis::Client::build_with_tls(info, c.clone())?,
        None => redis::Client::open(info)?,
    })
}

/// A connection with no response timeout: a console waits for the server, it does not give up
/// on it mid-reply.
async fn plain(
    info: ConnectionInfo,
    certs: &Option<TlsCertificates>,
) -> Result<MultiplexedConnection> {
    Ok(client(info, certs)?
        .get_multiplexed_async_connection()
        .await?)
}

/// Whether the node at the other end runs in cluster mode. A user who may not run `INFO` (an
/// ACL user limited to EchoMQ's commands) is taken to be on one server.
async fn is_cluster(conn: &mut MultiplexedConnection) -> Result<bool> {
    let info: String = match redis::cmd("INFO").arg("cluster").query_async(conn).await {
        Ok(info) => info,
        Err(e) if e.code() == Some("NOPERM") => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1"))
}

/// The primaries' addresses from `CLUSTER NODES`: every node flagged `master` and not failed.
pub fn primaries_of(nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
            continue;
        }
        // ip:port@cport[,hostname]
        let hostport = addr.split('@').next().unwrap_or_default();
        if let Some((host, port)) = hostport.rsplit_once(':') {
            if let Ok(port) = port.parse() {
                out.push((host.to_string(), port));
            }
        }
    }
    out.sort();
    out
}

impl Deployment {
    /// Connects to the server at `url` (`redis://[user:password@]host:port[/db]`), and through
    /// it, when it is a cluster node, to the whole cluster.
    pub async fn connect(url: &str, tls: &Tls) -> Result<Deployment> {
        // rustls needs a process-wide crypto provider; a second install is refused, harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let info = url.into_connection_info()?;
        let certs = tls.certificates()?;
        let mut first = plain(info.clone(), &certs).await?;
        if !is_cluster(&mut first).await? {
            let addr = info.addr().to_string();
            return Ok(Deployment {
                routed: Routed::Single(first.clone()),
                primaries: vec![Node { addr, conn: first }],
                cluster: false,
            });
        }
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut first)
            .await?;
        let mut primaries = Vec::new();
        for (host, port) in primaries_of(&nodes) {
            let addr = match info.addr() {
                ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                    host: host.clone(),
                    port,
                    insecure: *insecure,
                    tls_params: None,
                },
                _ => ConnectionAddr::Tcp(host.clone(), port),
            };
            let conn = plain(info.clone().set_addr(addr), &certs).await?;
            primaries.push(Node {
                addr: format!("{host}:{port}"),
                conn,
            });
        }
        let mut builder = redis::cluster::ClusterClient::builder(vec![info]);
        if let Some(c) = certs {
            builder = builder.certs(c);
        }
        let router = builder.build()?.get_async_connection().await?;
        Ok(Deployment {
            routed: Routed::Cluster(router),
            primaries,
            cluster: true,
        })
    }

    pub fn queue(&self, name: &str) -> Queue<Routed> {
        Queue::new(self.routed.clone(), name)
    }

    /// Every queue of every primary, in name order, up to [`MAX_QUEUES`].
    pub async fn queues(&self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        for node in &self.primaries {
            let mut conn = node.conn.clone();
            let mut cursor = b"0".to_vec();
            loop {
                let reply: Value = redis::cmd("EMQ.QUEUES")
                    .arg("CURSOR")
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(QUEUES_PAGE)
                    .query_async(&mut conn)
                    .await?;
                let (next, names) = page(&reply)?;
                all.extend(
                    names
                        .iter()
                        .map(|n| String::from_utf8_lossy(n).into_owned()),
                );
                if next == b"0" || all.len() >= MAX_QUEUES {
                    break;
                }
                cursor = next;
            }
        }
        all.sort();
        all.dedup();
        all.truncate(MAX_QUEUES);
        Ok(all)
    }

    /// `INFO emq` of every primary, its counters summed by name (`emq_version` and the other
    /// text fields left out).
    pub async fn counters(&self) -> Result<BTreeMap<String, i64>> {
        let mut sum = BTreeMap::new();
        for (_, counters) in self.counters_by_node().await? {
            for (name, value) in counters {
                *sum.entry(name).or_insert(0) += value;
            }
        }
        Ok(sum)
    }

    /// `INFO emq` of each primary, by its address: its counters by name.
    pub async fn counters_by_node(&self) -> Result<Vec<(String, BTreeMap<String, i64>)>> {
        let mut out = Vec::with_capacity(self.primaries.len());
        for node in &self.primaries {
            let mut conn = node.conn.clone();
            let info: String = redis::cmd("INFO").arg("emq").query_async(&mut conn).await?;
            let counters = info_fields(&info)
                .map(|(name, value)| (name.to_string(), value))
                .collect();
            out.push((node.addr.clone(), counters));
        }
        Ok(out)
    }
}

/// The numeric `name:value` lines of an `INFO` section.
pub fn info_fields(info: &str) -> impl Iterator<Item = (&str, i64)> {
    info.lines().filter_map(|line| {
        let (name, value) = line.trim().split_once(':')?;
        Some((name, value.parse().ok()?))
    })
}

/// A `[next-cursor, [item, ...]]` reply (`EMQ.QUEUES`, `EMQ.JOBS`) as the cursor and the items.
pub fn page(reply: &Value) -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
    let (cursor, items) = page_of(reply)?;
    Ok((cursor, items.iter().filter_map(bytes).collect()))
}

/// [`page`], the items as the replies they are (`EMQ.GROUPS`' maps).
pub fn page_of(reply: &Value) -> Result<(Vec<u8>, &[Value])> {
    let unexpected = || Error::Reply(format!("{reply:?}"));
    let Value::Array(parts) = reply else {
        return Err(unexpected());
    };
    let (Some(cursor), Some(Value::Array(items))) = (parts.first().and_then(bytes), parts.get(1))
    else {
        return Err(unexpected());
    };
    Ok((cursor, items))
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::Int(n) => Some(n.to_string().into_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_primaries_are_the_masters_not_failed_with_their_client_port() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002,node-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 0 3 connected
d4 127.0.0.1:7004@17004 slave a1 0 0 1 connected
";
        assert_eq!(
            primaries_of(nodes),
            vec![
                ("127.0.0.1".to_string(), 7001),
                ("127.0.0.1".to_string(), 7002)
            ]
        );
    }

    #[test]
    fn info_fields_are_the_numeric_lines() {
        let info = "# emq\r\nemq_version:echomq:2.0.0\r\nemq_enqueued:12\r\nemq_acked:7\r\n";
        let fields: Vec<_> = info_fields(info).collect();
        assert_eq!(fields, vec![("emq_enqueued", 12), ("emq_acked", 7)]);
    }
}
