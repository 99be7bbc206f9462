//! The job lifecycle against a reference model (protocol.md §6): random sequences of enqueues,
//! batches, claims, acks (with results), failures, renewals (with progress), cancels, requeues
//! one by one and in bulk, purges, pauses and resumes, concurrency and rate limits set and
//! lifted, enqueues holding unique keys, with valid and stale tokens, and the dead
//! set kept to `emq.dead-max-jobs` by the timer, each reply compared with the model's, and the whole queue (every row and every set)
//! compared after each stretch of operations; a replica without the module ends with the same
//! data. Delays and leases are an hour long, so the timer acts only where the test moves a due
//! time or a lease deadline into the past, and every outcome is determined by the sequence.

use emq_harness as support;

use std::collections::BTreeMap;

use redis::{cmd, Value};
use support::*;

const MAX_ATTEMPTS: i64 = 3;
/// `emq.dead-max-jobs`: the timer trims the oldest dead jobs beyond it.
const DEAD_MAX: usize = 5;
const HOUR_MS: i64 = 3_600_000;
/// Ids drawn from a small range, so that operations keep meeting the same jobs.
const IDS: u64 = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Active,
    Scheduled,
    Dead,
    Done,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Active => "active",
            State::Scheduled => "scheduled",
            State::Dead => "dead",
            State::Done => "done",
        }
    }

    /// The queue's set that holds a job in this state, if any.
    fn set(self) -> Option<&'static str> {
        match self {
            State::Pending => Some("pending"),
            State::Active => Some("active"),
            State::Scheduled => Some("schedule"),
            State::Dead => Some("dead"),
            State::Done => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Job {
    state: State,
    attempts: i64,
    /// The tokens taken before its last requeue, in the row once it was requeued.
    fence: Option<i64>,
    payload: String,
    error: Option<String>,
    result: Option<String>,
    progress: Option<String>,
    /// Its `pending` score, kept in the row when not 0.
    priority: i64,
    /// The unique key it was enqueued with.
    unique: Option<String>,
    /// Its score in `schedule` or `dead`: a time the server's clock gave, read back once the
    /// job got there (the model orders those sets by it, as purges and the retention do).
    score: Option<f64>,
    /// The token of the attempt a cancel ended while it ran.
    cancelled: Option<i64>,
}

impl Job {
    /// Its current attempt's lease token: its attempts after its fence.
    fn token(&self) -> i64 {
        self.fence.unwrap_or(0) + self.attempts
    }
}

/// What a command answered, in a form both the server's reply and the model give.
#[derive(Debug, PartialEq)]
enum Answer {
    Int(i64),
    Text(String),
    Error(String),
    Ints(Vec<i64>),
    Jobs(Vec<(String, String, i64)>),
    /// A lease deadline: any time an hour or so from now.
    Deadline,
}

/// The model: every job the queue has a row for, by id, and whether the queue is paused.
#[derive(Default)]
struct Model {
    jobs: BTreeMap<String, Job>,
    /// `emq.done-ttl-ms 0`: an acknowledged job's row is deleted at once.
    keep_no_done: bool,
    paused: bool,
    /// `EMQ.LIMIT ... CONCURRENCY`.
    concurrency: Option<i64>,
    /// `EMQ.LIMIT ... RATE <n> PER <an hour>`, and the claims made in its window (every claim
    /// since it was set: the sequence lasts less than an hour).
    rate: Option<i64>,
    rate_used: i64,
    /// Unique keys, each with the job that took it and whether for a window (an hour long, so
    /// it holds through the sequence) or until that job is done or dead.
    unique: BTreeMap<String, (String, bool)>,
}

impl Model {
    fn enqueue(&mut self, id: &str, payload: &str, delayed: bool, priority: i64) -> i64 {
        if self.jobs.contains_key(id) {
            return 0;
        }
        let state = if delayed {
            State::Scheduled
        } else {
            State::Pending
        };
        self.jobs.insert(
            id.to_string(),
            Job {
                state,
                attempts: 0,
                fence: None,
                payload: payload.to_string(),
                error: None,
                result: None,
                progress: None,
                priority,
                unique: None,
                score: None,
                cancelled: None,
            },
        );
        1
    }

    fn claim(&mut self, count: usize) -> Vec<(String, String, i64)> {
        if self.paused {
            return Vec::new();
        }
        let room = |limit: Option<i64>, used: i64| {
            limit.map_or(usize::MAX, |n| (n - used).max(0) as usize)
        };
        let count = count
            .min(room(self.concurrency, self.count(State::Active)))
            .min(room(self.rate, self.rate_used));
        if self.rate.is_some() {
            self.rate_used += self.count(State::Pending).min(count as i64);
        }
        // The lowest priority first, then the lowest ids (base62 digits sort as bytes).
        let ids: Vec<String> = self
            .ordered(State::Pending)
            .into_iter()
            .take(count)
            .collect();
        ids.into_iter()
            .map(|id| {
                let job = self.jobs.get_mut(&id).expect("listed");
                job.state = State::Active;
                job.attempts += 1;
                (id, job.payload.clone(), job.token())
            })
            .collect()
    }

    /// `EMQ.ENQUEUE ... UNIQUE <key> [FOR <an hour>]`: `0` for a row that exists, the holder's id
    /// while the key is held, else `1`, the job taking the key.
    fn enqueue_unique(&mut self, id: &str, payload: &str, key: &str, window: bool) -> Answer {
        if self.jobs.contains_key(id) {
            return Answer::Int(0);
        }
        if let Some(holder) = self.holder(key) {
            return Answer::Text(holder);
        }
        self.enqueue(id, payload, false, 0);
        if let Some(job) = self.jobs.get_mut(id) {
            job.unique = Some(key.to_string());
        }
        self.unique
            .insert(key.to_string(), (id.to_string(), window));
        Answer::Int(1)
    }

    /// The job that holds `key` now, if one does.
    fn holder(&self, key: &str) -> Option<String> {
        let (holder, window) = self.unique.get(key)?;
        // The holder is the job that took the key: one enqueued again under its id (after its
        // row went) without the key holds nothing.
        let live = self.jobs.get(holder).is_some_and(|j| {
            matches!(j.state, State::Pending | State::Active | State::Scheduled)
                && j.unique.as_deref() == Some(key)
        });
        (*window || live).then(|| holder.clone())
    }

    /// The job, if `token` is its live lease.
    fn leased(&mut self, id: &str, token: i64) -> Option<&mut Job> {
        self.jobs
            .get_mut(id)
            .filter(|j| j.state == State::Active && j.token() == token)
    }

    fn ack(&mut self, id: &str, token: i64, result: Option<&str>) -> Answer {
        match self.leased(id, token) {
            Some(job) => {
                job.state = State::Done;
                job.result = result.map(str::to_string);
                if self.keep_no_done {
                    self.jobs.remove(id);
                }
                Answer::Int(1)
            }
            None => self.refusal(id, token),
        }
    }

    fn fail(&mut self, id: &str, token: i64, error: Option<&str>) -> Answer {
        match self.leased(id, token) {
            Some(job) => {
                if let Some(e) = error {
                    job.error = Some(e.to_string());
                }
                if job.attempts < MAX_ATTEMPTS {
                    job.state = State::Scheduled;
                    Answer::Text("scheduled".into())
                } else {
                    job.state = State::Dead;
                    Answer::Text("dead".into())
                }
            }
            None => self.refusal(id, token),
        }
    }

    fn renew(&mut self, id: &str, token: i64, progress: Option<&str>) -> Answer {
        match self.leased(id, token) {
            Some(job) => {
                if let Some(p) = progress {
                    job.progress = Some(p.to_string());
                }
                Answer::Deadline
            }
            None => self.refusal(id, token),
        }
    }

    /// The limits and their use, as `EMQ.LIMIT` replies them after `active` (and `EMQ.STATS`
    /// ends with them).
    fn limits(&self) -> Vec<(String, Option<i64>)> {
        let hour = self.rate.map(|_| HOUR_MS);
        [
            ("concurrency", self.concurrency),
            ("rate", self.rate),
            ("rate-per", hour),
            ("rate-used", Some(self.rate_used)),
            // The model sets no timeout (tests/timeouts.rs has them) and no group limit
            // (tests/groups.rs).
            ("timeout", None),
            ("group-concurrency", None),
            ("group-rate", None),
            ("group-rate-per", None),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into()
    }

    /// `EMQ.PAUSE` (`true`) or `EMQ.RESUME`: whether it changed anything.
    fn pause(&mut self, pause: bool) -> i64 {
        let changed = self.paused != pause;
        self.paused = pause;
        i64::from(changed)
    }

    /// The ids of `state`'s set, lowest score first (pending: id order; the others by the
    /// scores read back, then id).
    fn ordered(&self, state: State) -> Vec<String> {
        let mut ids: Vec<(f64, String)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.state == state)
            .map(|(id, j)| {
                let score = match state {
                    State::Pending => j.priority as f64,
                    _ => j.score.unwrap_or(0.0),
                };
                (score, id.clone())
            })
            .collect();
        ids.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// `EMQ.PURGE`: the `count` first jobs of `state`'s set are gone, rows and all.
    fn purge(&mut self, state: State, count: usize) -> i64 {
        let ids: Vec<String> = self.ordered(state).into_iter().take(count).collect();
        for id in &ids {
            self.jobs.remove(id);
        }
        ids.len() as i64
    }

    /// `EMQ.REQUEUE ... DEAD COUNT n`: the `count` oldest dead jobs go back to pending.
    fn requeue_dead(&mut self, count: usize) -> i64 {
        let ids: Vec<String> = self.ordered(State::Dead).into_iter().take(count).collect();
        for id in &ids {
            self.requeue(id);
        }
        ids.len() as i64
    }

    /// The dead set beyond `emq.dead-max-jobs`: the oldest go, rows and all.
    fn trim_dead(&mut self) {
        let over = (self.count(State::Dead) as usize).saturating_sub(DEAD_MAX);
        self.purge(State::Dead, over);
    }

    fn cancel(&mut self, id: &str) -> i64 {
        match self.jobs.get(id).map(|j| j.state) {
            Some(State::Pending | State::Scheduled) => {
                self.jobs.remove(id);
                1
            }
            Some(State::Active) => {
                let job = self.jobs.get_mut(id).expect("active");
                job.state = State::Dead;
                job.error = Some("cancelled".into());
                job.cancelled = Some(job.token());
                job.score = None;
                1
            }
            _ => 0,
        }
    }

    /// What a renewal or settle with a token that is not the lease's is told.
    fn refusal(&self, id: &str, token: i64) -> Answer {
        match self.jobs.get(id).and_then(|j| j.cancelled) {
            Some(ended) if ended == token => {
                Answer::Error("EMQCANCELLED the job was cancelled while it ran".into())
            }
            _ => lease_error(),
        }
    }

    fn requeue(&mut self, id: &str) -> i64 {
        match self.jobs.get_mut(id) {
            Some(job) if job.state == State::Dead => {
                job.state = State::Pending;
                job.fence = Some(job.token());
                job.attempts = 0;
                job.score = None;
                1
            }
            _ => 0,
        }
    }

    /// One of the jobs in `state`, chosen by `r`.
    fn pick(&self, state: State, r: u64) -> Option<String> {
        let ids: Vec<&String> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.state == state)
            .map(|(id, _)| id)
            .collect();
        (!ids.is_empty()).then(|| ids[r as usize % ids.len()].clone())
    }

    /// The job's due time or lease deadline has passed: a scheduled job becomes pending; an
    /// expired lease returns the job to pending, or buries it on its last attempt. Returns the
    /// new state.
    fn time_passes(&mut self, id: &str) -> State {
        let job = self.jobs.get_mut(id).expect("picked");
        job.state = match job.state {
            State::Active if job.attempts >= MAX_ATTEMPTS => {
                job.error = Some("lease expired".into());
                State::Dead
            }
            _ => State::Pending,
        };
        job.state
    }

    fn count(&self, state: State) -> i64 {
        self.jobs.values().filter(|j| j.state == state).count() as i64
    }
}

/// A priority for the next job, added to `c` as `PRIORITY <p>` (mostly none, or 0 given).
fn pick_priority(rng: &mut Rng, c: &mut redis::Cmd) -> i64 {
    let p = match rng.below(6) {
        0 => *rng.pick(&[-2, -1, 1, 2]),
        1 => 0,
        _ => return 0,
    };
    c.arg("PRIORITY").arg(p);
    p
}

/// After a step: the scores of jobs newly in `schedule` or `dead` read back, and the dead set
/// trimmed by the timer to `emq.dead-max-jobs` (waited for) as the model trims it.
fn settle(con: &mut Connection, q: &str, model: &mut Model, step: usize) {
    for (id, job) in model.jobs.iter_mut() {
        let set = match job.state {
            State::Scheduled => "schedule",
            State::Dead => "dead",
            _ => {
                job.score = None;
                continue;
            }
        };
        if job.score.is_none() {
            job.score = set_score(con, q, set, id);
        }
    }
    if model.count(State::Dead) as usize > DEAD_MAX {
        assert!(
            wait_until(std::time::Duration::from_secs(5), || {
                set_len(con, q, "dead") as usize == DEAD_MAX
            }),
            "step {step}: the timer trims the dead set to {DEAD_MAX}"
        );
        model.trim_dead();
    }
}

fn lease_error() -> Answer {
    Answer::Error("EMQLEASE stale or missing lease token".into())
}

/// The server's answer to `c`, read as the model's answer `like` is shaped.
fn ask(con: &mut Connection, c: &redis::Cmd, like: &Answer) -> Answer {
    let v = match c.query::<Value>(con) {
        Ok(v) => v,
        Err(e) => return Answer::Error(error_text(&e)),
    };
    match (like, &v) {
        (Answer::Int(_), Value::Int(n)) => Answer::Int(*n),
        (Answer::Deadline, Value::Int(n)) => {
            let now = now_ms();
            assert!(
                (now + HOUR_MS - 60_000..=now + HOUR_MS).contains(n),
                "deadline {n}"
            );
            Answer::Deadline
        }
        (Answer::Text(_), Value::Int(n)) => Answer::Int(*n),
        (Answer::Text(_), v) => Answer::Text(text(v)),
        (Answer::Ints(_), Value::Array(items)) => Answer::Ints(
            items
                .iter()
                .map(|i| match i {
                    Value::Int(n) => *n,
                    other => panic!("an integer: {other:?}"),
                })
                .collect(),
        ),
        (Answer::Jobs(_), Value::Array(items)) => Answer::Jobs(
            items
                .iter()
                .map(|job| match job {
                    Value::Array(f) if f.len() == 3 => match &f[2] {
                        Value::Int(n) => (text(&f[0]), text(&f[1]), *n),
                        other => panic!("attempts: {other:?}"),
                    },
                    other => panic!("a claimed job: {other:?}"),
                })
                .collect(),
        ),
        _ => Answer::Text(format!("{v:?}")),
    }
}

/// Every row and set of the queue equals the model: each job's state, attempts, payload and
/// error, which one set holds it, the counts of `EMQ.STATS`, and no other key.
fn check_queue(con: &mut Connection, q: &str, model: &Model, step: usize) {
    let stats: Vec<(String, Option<i64>)> = cmd("EMQ.STATS").arg(q).query(con).expect("stats");
    let mut expected: Vec<(String, Option<i64>)> = [
        ("pending", State::Pending),
        ("active", State::Active),
        ("scheduled", State::Scheduled),
        ("dead", State::Dead),
    ]
    .map(|(name, s)| (name.to_string(), Some(model.count(s))))
    .into();
    // The model makes no parents (tests/flows.rs does).
    expected.push(("waiting".to_string(), Some(0)));
    // Nor groups (tests/groups.rs does).
    expected.push(("groups".to_string(), Some(0)));
    expected.push(("paused".to_string(), Some(i64::from(model.paused))));
    expected.extend(model.limits());
    assert_eq!(stats, expected, "EMQ.STATS at step {step}");
    let mut keys: Vec<String> = model.jobs.keys().map(|id| row_key(q, id)).collect();
    if model.paused || model.concurrency.is_some() || model.rate.is_some() {
        keys.push(set_key(q, "meta"));
    }
    if model.rate_used > 0 {
        keys.push(set_key(q, "rate"));
    }
    for s in [State::Pending, State::Active, State::Scheduled, State::Dead] {
        if let (Some(set), true) = (s.set(), model.count(s) > 0) {
            keys.push(set_key(q, set));
        }
    }
    keys.sort();
    // The unique table holds every key the model says is held; what holds nothing any more goes
    // when the timer's sweep comes to it.
    let table: BTreeMap<String, String> = cmd("HGETALL")
        .arg(set_key(q, "unique"))
        .query(con)
        .expect("unique");
    for key in model.unique.keys() {
        if let Some(holder) = model.holder(key) {
            let entry = table
                .get(key)
                .map(|v| v.split(':').next().unwrap_or("").to_string());
            assert_eq!(entry, Some(holder), "unique key {key} at step {step}");
        }
    }
    let unique_key = set_key(q, "unique");
    let on_server: Vec<String> = keys_of(con, q)
        .into_iter()
        .filter(|k| *k != unique_key)
        .collect();
    assert_eq!(on_server, keys, "the queue's keys at step {step}");
    for n in 1..=IDS {
        let id = job_id(n);
        let mut row: BTreeMap<String, String> =
            cmd("HGETALL").arg(row_key(q, &id)).query(con).expect("row");
        // The metrics' time a job became ready again (`ready`), which the model does not keep:
        // its value is tests/metrics.rs's.
        row.remove("ready");
        let Some(job) = model.jobs.get(&id) else {
            assert!(row.is_empty(), "{id} has no row at step {step}: {row:?}");
            continue;
        };
        let mut fields = BTreeMap::from([
            ("state".to_string(), job.state.word().to_string()),
            ("attempts".to_string(), job.attempts.to_string()),
            ("payload".to_string(), job.payload.clone()),
        ]);
        if job.priority != 0 {
            fields.insert("priority".into(), job.priority.to_string());
        }
        if let Some(key) = &job.unique {
            fields.insert("unique".into(), key.clone());
        }
        if let Some(fence) = job.fence {
            fields.insert("fence".into(), fence.to_string());
        }
        if let Some(token) = job.cancelled {
            fields.insert("cancelled".into(), token.to_string());
        }
        for (name, value) in [
            ("error", &job.error),
            ("result", &job.result),
            ("progress", &job.progress),
        ] {
            if let Some(v) = value {
                fields.insert(name.into(), v.clone());
            }
        }
        assert_eq!(row, fields, "{id}'s row at step {step}");
        for set in ["pending", "active", "schedule", "dead"] {
            assert_eq!(
                set_score(con, q, set, &id).is_some(),
                job.state.set() == Some(set),
                "{id} ({:?}) in {set} at step {step}",
                job.state
            );
        }
        let ttl: i64 = cmd("PTTL").arg(row_key(q, &id)).query(con).expect("pttl");
        assert_eq!(
            ttl > 0,
            job.state == State::Done,
            "{id}'s TTL at step {step}"
        );
    }
}

#[test]
fn random_lifecycle_sequences_match_the_reference_model() {
    run_sequences(0x5EED_11FE, false);
}

#[test]
fn random_lifecycle_sequences_match_the_model_when_done_rows_are_deleted() {
    // `emq.done-ttl-ms 0`: an acked job's row goes at once, so its id may be enqueued again.
    run_sequences(0xD0E_5EED, true);
}

fn run_sequences(seed: u64, keep_no_done: bool) {
    // A replica without the module follows along: the effects of every sequence replicate.
    let done_ttl = if keep_no_done { "0" } else { "86400000" };
    // Time passes by hand (a due time or deadline moved to the past with `ZADD ... XX`), which
    // the timer hears of only when it learns every foreign write as it happens.
    let server = Server::start(
        Options::primary()
            .arg("emq.learn-foreign-writes", "yes")
            .arg("emq.max-attempts", &MAX_ATTEMPTS.to_string())
            .arg("emq.done-ttl-ms", done_ttl)
            .arg("emq.dead-max-jobs", &DEAD_MAX.to_string()),
    );
    let replica = Server::replica_of(&server, Options::without_module());
    let mut con = server.conn();
    let mut r = replica.conn();
    wait_link_up(&mut r);
    let q = "model";
    let mut model = Model {
        keep_no_done,
        ..Model::default()
    };
    let mut rng = Rng::seeded(seed);
    let hour = HOUR_MS.to_string();
    let steps = 4_000;
    let mut reached: BTreeMap<(String, String), usize> = BTreeMap::new();
    for step in 0..steps {
        let id = job_id(1 + rng.below(IDS));
        // A job's live token half of the time; otherwise one off by one (stale or never
        // issued), or any token for a job that is not active.
        let live = model.jobs.get(&id).map_or(1, Job::token);
        let token = match rng.below(4) {
            0 | 1 => live,
            2 => live - 1,
            _ => live + 1,
        }
        .max(1);
        let payload = format!("p{step}");
        let op = rng.below(26);
        if op == 23 {
            // A limit changes: a concurrency limit of 1-6 or none, or a rate limit a little
            // above what its window holds (an hour long, so it never frees by itself here).
            let mut c = cmd("EMQ.LIMIT");
            c.arg(q);
            match rng.below(4) {
                0 => {
                    let n = 1 + rng.below(6) as i64;
                    c.arg("CONCURRENCY").arg(n);
                    model.concurrency = Some(n);
                }
                1 | 2 => {
                    c.arg("CONCURRENCY").arg("OFF");
                    model.concurrency = None;
                }
                _ => {
                    let n = model.rate_used + 1 + rng.below(30) as i64;
                    c.arg("RATE").arg(n).arg("PER").arg(&hour);
                    model.rate = Some(n);
                }
            }
            let got: Vec<(String, Option<i64>)> = c.query(&mut con).expect("EMQ.LIMIT");
            let mut expected = vec![("active".to_string(), Some(model.count(State::Active)))];
            expected.extend(model.limits());
            assert_eq!(got, expected, "step {step}: EMQ.LIMIT");
            continue;
        }
        if op >= 24 {
            // Time passes for one job: its due time or its lease deadline is moved to the
            // past, and the timer moves it on its own.
            let (state, set) = if op == 24 {
                (State::Scheduled, "schedule")
            } else {
                (State::Active, "active")
            };
            let Some(id) = model.pick(state, rng.next_u64()) else {
                continue;
            };
            let _: i64 = cmd("ZADD")
                .arg(set_key(q, set))
                .arg("XX")
                .arg(0)
                .arg(&id)
                .query(&mut con)
                .expect("zadd");
            let to = model.time_passes(&id);
            assert!(
                wait_until(std::time::Duration::from_secs(5), || {
                    job_state(&mut con, q, &id).as_deref() == Some(to.word())
                }),
                "step {step}: the timer moves {id} from {state:?} to {to:?}"
            );
            *reached
                .entry((set.to_string(), format!("{to:?}")))
                .or_insert(0) += 1;
            settle(&mut con, q, &mut model, step);
            continue;
        }
        let (c, expected) = match op {
            0 if rng.below(2) == 0 => {
                let key = format!("u{}", rng.below(5));
                let window = rng.below(3) == 0;
                let mut c = cmd("EMQ.ENQUEUE");
                c.arg(q).arg(&id).arg(&payload).arg("UNIQUE").arg(&key);
                if window {
                    c.arg("FOR").arg(&hour);
                }
                (c, model.enqueue_unique(&id, &payload, &key, window))
            }
            0..=3 => {
                let mut c = cmd("EMQ.ENQUEUE");
                c.arg(q).arg(&id).arg(&payload);
                let priority = pick_priority(&mut rng, &mut c);
                (
                    c,
                    Answer::Int(model.enqueue(&id, &payload, false, priority)),
                )
            }
            4 => {
                let mut c = cmd("EMQ.ENQUEUE");
                c.arg(q).arg(&id).arg(&payload).arg("DELAY").arg(&hour);
                let priority = pick_priority(&mut rng, &mut c);
                (c, Answer::Int(model.enqueue(&id, &payload, true, priority)))
            }
            5 => {
                let mut c = cmd("EMQ.MENQUEUE");
                c.arg(q);
                let mut replies = Vec::new();
                for k in 0..1 + rng.below(4) {
                    let id = job_id(1 + rng.below(IDS));
                    let payload = format!("p{step}.{k}");
                    let priority = pick_priority(&mut rng, &mut c);
                    c.arg(&id).arg(&payload);
                    replies.push(model.enqueue(&id, &payload, false, priority));
                }
                (c, Answer::Ints(replies))
            }
            6..=9 => {
                let count = 1 + rng.below(3) as usize;
                let mut c = cmd("EMQ.CLAIM");
                c.arg(q).arg("COUNT").arg(count).arg("LEASE").arg(&hour);
                (c, Answer::Jobs(model.claim(count)))
            }
            10..=12 => {
                let mut c = cmd("EMQ.ACK");
                c.arg(q).arg(&id).arg(token);
                let result = (rng.below(2) == 0).then(|| format!("r{step}"));
                if let Some(r) = &result {
                    c.arg("RESULT").arg(r);
                }
                (c, model.ack(&id, token, result.as_deref()))
            }
            13..=15 => {
                let mut c = cmd("EMQ.FAIL");
                c.arg(q).arg(&id).arg(token);
                let error = (rng.below(2) == 0).then(|| format!("e{step}"));
                if let Some(e) = &error {
                    c.arg("ERROR").arg(e);
                }
                c.arg("RETRY-IN").arg(&hour);
                (c, model.fail(&id, token, error.as_deref()))
            }
            16 => {
                let mut c = cmd("EMQ.RENEW");
                c.arg(q).arg(&id).arg(token).arg(&hour);
                let progress = (rng.below(2) == 0).then(|| format!("g{step}"));
                if let Some(p) = &progress {
                    c.arg("PROGRESS").arg(p);
                }
                (c, model.renew(&id, token, progress.as_deref()))
            }
            17 => {
                let mut c = cmd("EMQ.CANCEL");
                c.arg(q).arg(&id);
                (c, Answer::Int(model.cancel(&id)))
            }
            18 => {
                let mut c = cmd("EMQ.REQUEUE");
                c.arg(q).arg(&id);
                (c, Answer::Int(model.requeue(&id)))
            }
            19 => {
                let pause = rng.below(2) == 0;
                let c = cmd(if pause { "EMQ.PAUSE" } else { "EMQ.RESUME" })
                    .arg(q)
                    .clone();
                (c, Answer::Int(model.pause(pause)))
            }
            20 | 21 => {
                let (name, state) = *rng.pick(&[
                    ("pending", State::Pending),
                    ("scheduled", State::Scheduled),
                    ("dead", State::Dead),
                ]);
                let count = 1 + rng.below(3) as usize;
                let mut c = cmd("EMQ.PURGE");
                c.arg(q).arg(name).arg("COUNT").arg(count);
                (c, Answer::Int(model.purge(state, count)))
            }
            _ => {
                let count = 1 + rng.below(2) as usize;
                let mut c = cmd("EMQ.REQUEUE");
                c.arg(q).arg("DEAD").arg("COUNT").arg(count);
                (c, Answer::Int(model.requeue_dead(count)))
            }
        };
        let got = ask(&mut con, &c, &expected);
        let packed = String::from_utf8_lossy(&c.get_packed_command()).into_owned();
        assert_eq!(
            got,
            expected,
            "step {step}: {packed:?} under {:?}",
            model.limits()
        );
        let name = match c.args_iter().next() {
            Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).into_owned(),
            _ => String::new(),
        };
        *reached.entry((name, format!("{expected:?}"))).or_insert(0) += 1;
        settle(&mut con, q, &mut model, step);
        if step % 200 == 199 {
            check_queue(&mut con, q, &model, step);
        }
    }
    check_queue(&mut con, q, &model, steps);
    assert!(
        info_int(&mut con, "emq", "emq_limited") > 0,
        "the limits held some claims back"
    );
    wait_caught_up(&mut con, &mut r);
    assert_eq!(
        digest(&mut r),
        digest(&mut con),
        "the replica holds the same data"
    );
    assert_eq!(keys_of(&mut r, q), keys_of(&mut con, q));
    // The sequences reached every outcome of every command (or the test proves little).
    let outcomes = |name: &str| -> Vec<String> {
        reached
            .keys()
            .filter(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .collect()
    };
    for (name, needles) in [
        ("EMQ.ENQUEUE", &["Int(1)", "Int(0)", "Text(\"JOB"][..]),
        ("EMQ.MENQUEUE", &["1", "0"]),
        ("EMQ.CLAIM", &["Jobs([])", "Jobs([("]),
        ("EMQ.ACK", &["Int(1)", "EMQLEASE", "EMQCANCELLED"]),
        (
            "EMQ.FAIL",
            &["scheduled", "dead", "EMQLEASE", "EMQCANCELLED"],
        ),
        ("EMQ.RENEW", &["Deadline", "EMQLEASE", "EMQCANCELLED"]),
        ("EMQ.CANCEL", &["Int(1)", "Int(0)"]),
        ("EMQ.REQUEUE", &["Int(1)", "Int(0)"]),
        ("EMQ.PAUSE", &["Int(1)", "Int(0)"]),
        ("EMQ.RESUME", &["Int(1)", "Int(0)"]),
        ("EMQ.PURGE", &["Int(0)", "Int(1)", "Int(2)"]),
        ("schedule", &["Pending"]),
        ("active", &["Pending", "Dead"]),
    ] {
        let seen = outcomes(name);
        for needle in needles {
            assert!(
                seen.iter().any(|a| a.contains(needle)),
                "{name} never answered {needle}: {seen:?}"
            );
        }
    }
}
