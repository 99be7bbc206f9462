//! What the client's suites share: servers with the workspace's module (the harness finds
//! target/release/libechomq.so, or ECHOMQ_MODULE), connections a blocked claim can wait on,
//! a worker on them, cluster connections, a claim made by hand, and the events a hook recorded.
#![allow(dead_code)] // each suite takes what it needs

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq_client::{Job, Queue, Worker, WorkerEvent};
use emq_harness::{cluster::Cluster, Options, Server};
use redis::aio::MultiplexedConnection;

pub fn start(opts: Options) -> Server {
    Server::start(opts)
}

/// A multiplexed connection with no response timeout (a blocked claim waits in the server).
pub async fn conn(server: &Server) -> MultiplexedConnection {
    let client = redis::Client::open(server.url()).expect("client");
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connection")
}

/// A cluster connection, its slots refreshed when a node goes (the client's own retries).
pub async fn cluster_conn(cluster: &Cluster) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::builder(cluster.urls())
        .response_timeout(Duration::from_secs(10))
        .build()
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection")
}

pub async fn worker_of<H, F>(
    server: &Server,
    queue: &str,
    handler: H,
) -> Worker<MultiplexedConnection, H>
where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = echomq_client::Outcome> + Send + 'static,
{
    Worker::new(conn(server).await, conn(server).await, queue, handler)
}

/// The events a hook recorded.
pub type Recorded = Arc<Mutex<Vec<WorkerEvent>>>;

pub fn events_of(recorded: &Recorded, id: &str) -> Vec<WorkerEvent> {
    recorded
        .lock()
        .expect("lock")
        .iter()
        .filter(|e| e.id == id)
        .cloned()
        .collect()
}

/// `EMQ.CLAIM <queue> COUNT 1 LEASE 60000` through the client, as a worker elsewhere would:
/// the job it took, id and token.
pub async fn claim_one<C>(q: &Queue<C>) -> (String, i64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let args = [
        b"COUNT".to_vec(),
        b"1".to_vec(),
        b"LEASE".to_vec(),
        b"60000".to_vec(),
    ];
    let reply = q.call("EMQ.CLAIM", &args).await.expect("claim");
    let jobs: Vec<(String, Vec<u8>, i64)> = redis::from_redis_value(reply).expect("jobs");
    let [(id, _, token)]: [_; 1] = jobs.try_into().expect("one job claimed");
    (id, token)
}

/// Whether job `id` of `q` is done within 30 s (read on a connection of its own).
pub fn becomes_done(server: &Server, q: &str, id: &str) -> bool {
    let mut admin = server.conn();
    emq_harness::wait_until(Duration::from_secs(30), || {
        emq_harness::job_state(&mut admin, q, id).as_deref() == Some("done")
    })
}
