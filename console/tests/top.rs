//! `emq top` drawn on ratatui's test backend from a real server's samples: the screen shows the
//! queues and their counts, updates when jobs move, shows the rates, waits and counters, and its keys
//! sort, filter, pause and resume on the server; control characters in what it shows are escaped.

mod common;

use common::{count, enqueue, server};
use emq::deployment::Deployment;
use emq::history::Sampler;
use emq::top::{apply, Action, Top};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyCode;
use ratatui::Terminal;

/// The screen as lines of text.
fn screen(top: &Top) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(110, 24)).expect("terminal");
    terminal.draw(|f| top.draw(f)).expect("draw");
    let buffer = terminal.backend().buffer().clone();
    let width = buffer.area.width as usize;
    buffer
        .content
        .chunks(width)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
        .collect()
}

/// The words of the screen line naming `queue`.
fn row_of(lines: &[String], queue: &str) -> Vec<String> {
    let line = lines
        .iter()
        .find(|l| l.split_whitespace().any(|w| w.trim_matches('│') == queue))
        .unwrap_or_else(|| panic!("no row for {queue} in\n{}", lines.join("\n")));
    line.split(|c: char| c.is_whitespace() || c == '│')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The view of `s`, with its first sample taken.
async fn watching(s: &common::Server) -> (Deployment, Top, Sampler) {
    let dep = Deployment::connect(&s.url(), &Default::default())
        .await
        .expect("connect");
    let mut top = Top::default();
    let mut sampler = Sampler::default();
    top.history
        .push(sampler.sample(&dep).await.expect("sample"));
    (dep, top, sampler)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_screen_shows_every_queue_and_follows_the_jobs_as_they_move() {
    let s = server();
    let mut con = s.conn();
    for _ in 0..4 {
        enqueue(&mut con, "orders", "x");
    }
    enqueue(&mut con, "emails", "y");
    // Each queue's own rates come from the server's counts, with no event stream.
    let (dep, mut top, mut sampler) = watching(&s).await;
    let lines = screen(&top);
    assert_eq!(
        row_of(&lines, "orders")[..5],
        ["orders", "4", "0", "0", "0"]
    );
    assert_eq!(
        row_of(&lines, "emails")[..5],
        ["emails", "1", "0", "0", "0"]
    );
    assert!(
        lines.iter().any(|l| l.contains("2 queues, by name")),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l.contains("enqueued=5")), "{lines:#?}");

    // Two claimed, one of them acked, one enqueued: the next sample moves the row, and the
    // rates appear.
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg("orders")
        .arg("COUNT")
        .arg(2)
        .query(&mut con)
        .expect("claim");
    let (id, _, token) = &claimed[0];
    let _: i64 = redis::cmd("EMQ.ACK")
        .arg("orders")
        .arg(id)
        .arg(token)
        .query(&mut con)
        .expect("ack");
    enqueue(&mut con, "orders", "z");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    top.history
        .push(sampler.sample(&dep).await.expect("sample"));
    let lines = screen(&top);
    let orders = row_of(&lines, "orders");
    assert_eq!(orders[..5], ["orders", "3", "1", "0", "0"]);
    let acked: f64 = orders[7].parse().unwrap_or_else(|_| panic!("{orders:?}"));
    assert!(acked > 0.0, "{orders:?}");
    // The wait of the two jobs claimed since the first sample, its median and 99th percentile
    // bounds (`<n> ms / <n> ms`); none claimed from emails.
    assert_eq!(
        (orders[9].as_str(), orders[10].as_str()),
        ("ms", "/"),
        "{orders:?}"
    );
    assert_eq!(row_of(&lines, "emails")[8], "-", "none claimed");
    assert_eq!(row_of(&lines, "emails")[7], "0.0", "counted, none acked");
    let rates = lines
        .iter()
        .find(|l| l.contains("claimed"))
        .expect("rates line");
    assert!(!rates.contains("claimed -"), "{rates}");
    assert!(
        lines.iter().any(|l| l.contains("acked=1  claimed=2")),
        "{lines:#?}"
    );
    // The screen as text, kept beside the dashboard's screenshots.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console");
    std::fs::create_dir_all(&dir).expect("target/console");
    std::fs::write(dir.join("top.txt"), lines.join("\n")).expect("keep the screen");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_parent_is_counted_in_the_waiting_column() {
    let s = server();
    let mut con = s.conn();
    for id in ["JOB0SXemXfm5P1", "JOB0SXemXfm5P2"] {
        let _: i64 = redis::cmd("EMQ.ENQUEUE")
            .arg("albums")
            .arg(id)
            .arg("publish")
            .arg("CHILDREN")
            .arg(2)
            .query(&mut con)
            .expect("a parent");
    }
    enqueue(&mut con, "albums", "plain");
    let (_dep, top, _sampler) = watching(&s).await;
    let lines = screen(&top);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("dead      waiting   oldest")),
        "{lines:#?}"
    );
    // queue, pending, active, scheduled, dead, waiting
    assert_eq!(
        row_of(&lines, "albums")[..6],
        ["albums", "1", "0", "0", "0", "2"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_sort_filter_and_pause_and_resume_the_chosen_queue_on_the_server() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "alpha", "x");
    for _ in 0..3 {
        enqueue(&mut con, "beta", "x");
    }
    let (dep, mut top, mut sampler) = watching(&s).await;
    let names = |top: &Top| top.rows().into_iter().map(|q| q.name).collect::<Vec<_>>();
    assert_eq!(names(&top), ["alpha", "beta"]);
    assert_eq!(top.key(KeyCode::Char('s')), Action::None);
    assert_eq!(names(&top), ["beta", "alpha"], "by pending");
    assert!(screen(&top).iter().any(|l| l.contains("by pending")));

    for k in ['/', 'a', 'l'] {
        top.key(KeyCode::Char(k));
    }
    top.key(KeyCode::Enter);
    assert_eq!(names(&top), ["alpha"]);
    assert!(screen(&top).iter().any(|l| l.contains("matching \"al\"")));

    let action = top.key(KeyCode::Char('p'));
    assert_eq!(action, Action::Pause("alpha".into()));
    assert!(apply(&mut top, &dep, action).await);
    assert_eq!(count(&mut con, "alpha", "paused"), 1);
    assert_eq!(count(&mut con, "beta", "paused"), 0);
    top.history
        .push(sampler.sample(&dep).await.expect("sample"));
    assert!(row_of(&screen(&top), "alpha").contains(&"paused".to_string()));

    let action = top.key(KeyCode::Char('r'));
    assert!(apply(&mut top, &dep, action).await);
    assert_eq!(count(&mut con, "alpha", "paused"), 0);
    assert!(top.status.contains("alpha resumed"), "{}", top.status);
    let quit = top.key(KeyCode::Char('q'));
    assert!(!apply(&mut top, &dep, quit).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn control_characters_in_the_status_and_the_filter_are_drawn_escaped() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "plain", "x");
    let (_dep, mut top, _sampler) = watching(&s).await;
    // What an action's error reads is the server's text: shown, never obeyed.
    top.status = "ERR \x1b[2Jgone\x07".into();
    let lines = screen(&top);
    assert!(
        lines.iter().any(|l| l.contains("ERR \\e[2Jgone\\x07")),
        "{lines:#?}"
    );
    for k in ['/', '\u{9b}', 'p'] {
        top.key(KeyCode::Char(k));
    }
    let lines = screen(&top);
    assert!(
        lines.iter().any(|l| l.contains("filter: \\u{9b}p_")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(['\x1b', '\x07', '\u{9b}'])),
        "{lines:#?}"
    );
}
