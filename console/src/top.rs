//! `emq top`: a live terminal view of every queue. The view is a pure function of [`Top`] (the
//! history of samples and what the operator chose), drawn with ratatui, so a test draws it on
//! ratatui's test backend from a real server's samples.

use std::cmp::Reverse;
use std::time::Duration;

use crate::error::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use crate::deployment::Deployment;
use crate::escape::terminal;
use crate::history::{History, Sampler, RATES};
use crate::overview::{age, QueueRow};
use crate::waits::show;

/// The column the queues are sorted by; `s` goes to the next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sort {
    #[default]
    Name,
    Pending,
    Dead,
    Oldest,
}

impl Sort {
    fn next(self) -> Sort {
        match self {
            Sort::Name => Sort::Pending,
            Sort::Pending => Sort::Dead,
            Sort::Dead => Sort::Oldest,
            Sort::Oldest => Sort::Name,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Pending => "pending",
            Sort::Dead => "dead",
            Sort::Oldest => "oldest",
        }
    }
}

/// What `emq top` shows and what the operator chose.
#[derive(Default)]
pub struct Top {
    pub history: History,
    pub sort: Sort,
    /// Only queues whose name holds this.
    pub filter: String,
    /// Keys go to the filter until Enter or Esc.
    pub typing: bool,
    pub selected: usize,
    /// The last action's outcome, or its error.
    pub status: String,
}

/// What a key asks of the loop.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    Pause(String),
    Resume(String),
}

impl Top {
    /// The queues shown, filtered and sorted.
    pub fn rows(&self) -> Vec<QueueRow> {
        let mut rows: Vec<QueueRow> = self
            .history
            .latest()
            .map(|s| s.queues.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|q| q.name.contains(&self.filter))
            .collect();
        match self.sort {
            Sort::Name => rows.sort_by(|a, b| a.name.cmp(&b.name)),
            Sort::Pending => rows.sort_by_key(|q| Reverse(q.pending)),
            Sort::Dead => rows.sort_by_key(|q| Reverse(q.dead)),
            Sort::Oldest => rows.sort_by_key(|q| Reverse(q.oldest_pending_ms)),
        }
        rows
    }

    pub fn key(&mut self, code: KeyCode) -> Action {
        if self.typing {
            match code {
                KeyCode::Enter | KeyCode::Esc => self.typing = false,
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            self.selected = 0;
            return Action::None;
        }
        let chosen = self.rows().get(self.selected).map(|q| q.name.clone());
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('/') => self.typing = true,
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(self.rows().len().saturating_sub(1));
            }
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Char('p') => return chosen.map_or(Action::None, Action::Pause),
            KeyCode::Char('r') => return chosen.map_or(Action::None, Action::Resume),
            _ => {}
        }
        Action::None
    }

    pub fn draw(&self, frame: &mut Frame) {
        let [head, body, counters_area, help_area] = Layout::vertical([
            Constraint::Length(3),
            Constraint::Min(4),
            Constraint::Length(4),
            Constraint::Length(1),
        ])
        .areas(frame.area());

        let rates: Vec<String> = RATES
            .iter()
            .map(|(counter, label)| {
                let rate = self
                    .history
                    .rate(counter)
                    .map_or("-".to_string(), |r| format!("{r:.1}/s"));
                format!("{label} {rate}")
            })
            .collect();
        frame.render_widget(
            Paragraph::new(Line::from(rates.join("   ")))
                .block(Block::bordered().title(" EchoMQ: rates over the last minute ")),
            head,
        );

        let rows = self.rows();
        let table = Table::new(
            rows.iter().map(|q| {
                Row::new(vec![
                    terminal(&q.name).into_owned(),
                    q.pending.to_string(),
                    q.active.to_string(),
                    q.scheduled.to_string(),
                    q.dead.to_string(),
                    q.waiting.to_string(),
                    q.oldest_pending_ms.map_or("-".to_string(), age),
                    self.history
                        .queue_rate(&q.name, "acked")
                        .map_or("-".to_string(), |r| format!("{r:.1}")),
                    self.history
                        .latest_latency(&q.name)
                        .map_or("-".to_string(), |l| {
                            format!("{} / {}", show(l.wait.p50_ms), show(l.wait.p99_ms))
                        }),
                    if q.paused {
                        "paused".into()
                    } else {
                        String::new()
                    },
                ])
            }),
            [
                Constraint::Min(12),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(9),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Length(13),
                Constraint::Length(7),
            ],
        )
        .header(
            Row::new([
                "queue",
                "pending",
                "active",
                "scheduled",
                "dead",
                "waiting",
                "oldest",
                "acked/s",
                "wait p50/p99",
                "",
            ])
            .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(format!(
            " {} queues, by {}{} ",
            rows.len(),
            self.sort.label(),
            if self.filter.is_empty() {
                String::new()
            } else {
                format!(", matching \"{}\"", terminal(&self.filter))
            }
        )));
        let mut state = TableState::default().with_selected(Some(self.selected));
        frame.render_stateful_widget(table, body, &mut state);

        let counters = self.history.latest().map_or(String::new(), |s| {
            if let Some(e) = &s.counters_error {
                return terminal(e).into_owned();
            }
            s.counters
                .iter()
                .filter(|(k, v)| **v != 0 && !k.starts_with("emq_timer"))
                .map(|(k, v)| format!("{}={v}", k.trim_start_matches("emq_")))
                .collect::<Vec<_>>()
                .join("  ")
        });
        frame.render_widget(
            Paragraph::new(counters)
                .wrap(ratatui::widgets::Wrap { trim: true })
                .block(Block::bordered().title(" INFO emq ")),
            counters_area,
        );
        let help = if self.typing {
            format!(
                "filter: {}_   (Enter to keep, Esc to end)",
                terminal(&self.filter)
            )
        } else {
            format!(
                "q quit  s sort  / filter  ↑↓ select  p pause  r resume   {}",
                terminal(&self.status)
            )
        };
        frame.render_widget(Paragraph::new(help), help_area);
    }
}

/// Samples the deployment every `interval` and draws the view until `q`.
pub async fn run(dep: Deployment, interval: Duration) -> Result<()> {
    let mut terminal = ratatui::try_init()?;
    let outcome = looped(&dep, interval, &mut terminal).await;
    ratatui::try_restore()?;
    outcome
}

async fn looped(
    dep: &Deployment,
    interval: Duration,
    terminal: &mut ratatui::DefaultTerminal,
) -> Result<()> {
    let mut top = Top::default();
    let mut sampler = Sampler::default();
    let mut next = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= next {
            match sampler.sample(dep).await {
                Ok(s) => top.history.push(s),
                Err(e) => top.status = e.to_string(),
            }
            next = tokio::time::Instant::now() + interval;
        }
        terminal.draw(|f| top.draw(f))?;
        let wait = next.saturating_duration_since(tokio::time::Instant::now());
        // crossterm's poll blocks its thread: give it one of the runtime's blocking threads.
        let key = tokio::task::spawn_blocking(move || -> std::io::Result<Option<KeyCode>> {
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press {
                        return Ok(Some(k.code));
                    }
                }
            }
            Ok(None)
        })
        .await
        .map_err(std::io::Error::other)??;
        let Some(code) = key else { continue };
        let action = top.key(code);
        if !apply(&mut top, dep, action).await {
            return Ok(());
        }
    }
}

/// Carries out what a key asked; `false` to quit.
pub async fn apply(top: &mut Top, dep: &Deployment, action: Action) -> bool {
    match action {
        Action::Quit => return false,
        Action::Pause(q) => {
            top.status = act(
                dep.queue(&q).pause().await.map_err(Into::into),
                &q,
                "paused",
            )
        }
        Action::Resume(q) => {
            top.status = act(
                dep.queue(&q).resume().await.map_err(Into::into),
                &q,
                "resumed",
            )
        }
        Action::None => {}
    }
    true
}

fn act(outcome: Result<bool>, queue: &str, verb: &str) -> String {
    match outcome {
        Ok(true) => format!("{queue} {verb}"),
        Ok(false) => format!("{queue} was {verb} already"),
        Err(e) => e.to_string(),
    }
}
