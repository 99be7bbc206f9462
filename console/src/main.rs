//! `emq`: EchoMQ's console. See docs/console.md.

use std::process::ExitCode;

use clap::Parser;
use emq::cli::{self, Cli};
use emq::error::Error;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Cli::parse();
    match cli::run(args).await {
        Ok(code) => code,
        Err(e) => {
            // The server's error as it came, or the connection's, its control characters escaped.
            eprintln!("{}", emq::escape::terminal(&e.to_string()));
            let code = match e {
                Error::Usage(_) => cli::EXIT_USAGE,
                _ => cli::EXIT_ERROR,
            };
            ExitCode::from(code)
        }
    }
}
