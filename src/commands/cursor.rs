//! The one cursor over a command's arguments, in the manner of valkeymodule-rs's `NextArg`: words
//! taken in turn, an option's value (or the one refusal for an option that lacks it), integers
//! in their range, bytes bounded as a payload, and a last optional `NAME <value>` pair.

use super::{is_token, parse_int};
use crate::host::register::Command;
use crate::host::reply::Args;
use crate::protocol::job::check_payload;
use crate::protocol::EmqError;

/// What a cursor reads: the bytes of argument `i`, for `i` below the count.
pub trait Words<'a> {
    fn arg_count(&self) -> usize;
    fn arg(&self, i: usize) -> &'a [u8];
}

impl<'a> Words<'a> for Args<'a> {
    fn arg_count(&self) -> usize {
        Args::len(self)
    }

    fn arg(&self, i: usize) -> &'a [u8] {
        Args::bytes(self, i)
    }
}

impl<'a> Words<'a> for &[&'a [u8]] {
    fn arg_count(&self) -> usize {
        self.len()
    }

    fn arg(&self, i: usize) -> &'a [u8] {
        self.get(i).copied().unwrap_or_default()
    }
}

/// The call's argument count (the command's name included) against `command`'s declared arity:
/// exactly `n`, or at least `-n`; else `Arity`.
pub fn check_arity(args: &dyn Words<'_>, command: &Command) -> Result<(), EmqError> {
    let (len, arity) = (args.arg_count() as i64, i64::from(command.arity));
    if (arity < 0 && len >= -arity) || len == arity {
        return Ok(());
    }
    Err(EmqError::Arity(command.name.to_str().unwrap_or("emq")))
}

/// A syntax refusal with a fixed text.
pub fn syntax(text: &'static str) -> EmqError {
    EmqError::Syntax(text.into())
}

/// An option named with nothing after it: the one text every command gives.
pub fn lacks_value() -> EmqError {
    syntax("syntax error: an option lacks its value")
}

/// The arguments from one place on, read in turn.
pub struct ArgCursor<'w, 'a> {
    words: &'w dyn Words<'a>,
    at: usize,
}

impl<'w, 'a> ArgCursor<'w, 'a> {
    /// The arguments from `words[at]` on.
    pub fn new(words: &'w dyn Words<'a>, at: usize) -> Self {
        Self { words, at }
    }

    /// Where the next word stands in the arguments.
    pub fn position(&self) -> usize {
        self.at
    }

    /// How many words are left.
    pub fn remaining(&self) -> usize {
        self.words.arg_count().saturating_sub(self.at)
    }

    /// Whether every word has been read.
    pub fn done(&self) -> bool {
        self.remaining() == 0
    }

    /// The next word, or `None` at the end.
    pub fn next_word(&mut self) -> Option<&'a [u8]> {
        if self.done() {
            return None;
        }
        let word = self.words.arg(self.at);
        self.at += 1;
        Some(word)
    }

    /// Whether the next word is the keyword `token` (ignoring ASCII case), taking it if so.
    pub fn next_is(&mut self, token: &str) -> bool {
        let is = !self.done() && is_token(self.words.arg(self.at), token);
        if is {
            self.at += 1;
        }
        is
    }

    /// The next option's name, once a value is known to follow it: `None` at the end, and
    /// [`lacks_value`] when the name is the last word.
    pub fn next_option(&mut self) -> Result<Option<&'a [u8]>, EmqError> {
        match self.remaining() {
            0 => Ok(None),
            1 => Err(lacks_value()),
            _ => Ok(self.next_word()),
        }
    }

    /// At least `n` more words, or [`lacks_value`].
    pub fn expect_values(&self, n: usize) -> Result<(), EmqError> {
        if self.remaining() < n {
            return Err(lacks_value());
        }
        Ok(())
    }

    /// The value of the option just read, or [`lacks_value`].
    pub fn value(&mut self) -> Result<&'a [u8], EmqError> {
        self.next_word().ok_or_else(lacks_value)
    }

    /// The next value as a decimal integer in `min..=max` (a syntax error naming `what`).
    pub fn next_int(&mut self, min: i64, max: i64, what: &str) -> Result<i64, EmqError> {
        parse_int(self.value()?, min, max, what)
    }

    /// The next value as bytes bounded by `emq.max-payload-bytes` (a result, an error text).
    pub fn next_bytes(&mut self) -> Result<&'a [u8], EmqError> {
        let value = self.value()?;
        check_payload(value)?;
        Ok(value)
    }

    /// The rest as one optional `NAME <value>` pair that ends the call: `Some(None)` when nothing
    /// is left, `Some(Some(value))` for exactly the pair, `None` for anything else (the caller's
    /// refusal, in its own words).
    pub fn last_option(&mut self, name: &str) -> Option<Option<&'a [u8]>> {
        match self.remaining() {
            0 => Some(None),
            2 if self.next_is(name) => self.next_word().map(Some),
            _ => None,
        }
    }

    /// The rest as one optional `NAME <bytes>` pair ([`Self::last_option`]), the bytes bounded
    /// as a payload.
    pub fn last_bytes(&mut self, name: &str) -> Result<Option<&'a [u8]>, EmqError> {
        let value = self.last_option(name).ok_or_else(|| {
            EmqError::Syntax(format!("syntax error: expected {name} <bytes>").into())
        })?;
        if let Some(value) = value {
            check_payload(value)?;
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'a>(list: &'a [&'a [u8]]) -> &'a [&'a [u8]] {
        list
    }

    #[test]
    fn the_arity_is_exact_or_a_least_count() {
        use super::super::{purge, stats};
        let w = |n: usize| vec![&b"x"[..]; n];
        let count = |n: usize| check_arity(&w(n).as_slice(), &stats::COMMAND);
        assert_eq!(count(2), Ok(()));
        assert_eq!(count(1), Err(EmqError::Arity("emq.stats")));
        assert_eq!(count(3), Err(EmqError::Arity("emq.stats")));
        let at_least = |n: usize| check_arity(&w(n).as_slice(), &purge::COMMAND);
        assert_eq!(at_least(3), Ok(()));
        assert_eq!(at_least(9), Ok(()));
        assert_eq!(at_least(2), Err(EmqError::Arity("emq.purge")));
    }

    #[test]
    fn words_come_in_turn_and_keywords_ignore_case() {
        let w = words(&[b"q", b"count", b"5", b"WITHPAYLOADS"]);
        let mut c = ArgCursor::new(&w, 1);
        assert_eq!((c.position(), c.remaining()), (1, 3));
        assert!(!c.next_is("LEASE"));
        assert!(c.next_is("COUNT"));
        assert_eq!(c.next_int(1, 10, "COUNT"), Ok(5));
        assert_eq!(c.next_word(), Some(&b"WITHPAYLOADS"[..]));
        assert!(c.done());
        assert_eq!(c.next_word(), None);
        assert!(!c.next_is("WITHPAYLOADS"));
    }

    #[test]
    fn an_option_without_its_value_is_refused_in_one_text() {
        let w = words(&[b"COUNT", b"5", b"LEASE"]);
        let mut c = ArgCursor::new(&w, 0);
        assert_eq!(c.next_option(), Ok(Some(&b"COUNT"[..])));
        assert_eq!(c.value(), Ok(&b"5"[..]));
        let lacks = EmqError::Syntax("syntax error: an option lacks its value".into());
        assert_eq!(c.next_option(), Err(lacks.clone()));
        assert_eq!(c.expect_values(2), Err(lacks_value()));
        assert_eq!(c.expect_values(1), Ok(()));
        assert_eq!(c.next_word(), Some(&b"LEASE"[..]));
        assert_eq!(c.value(), Err(lacks));
        assert_eq!(c.next_int(1, 2, "LEASE"), Err(lacks_value()));
        assert_eq!(c.next_option(), Ok(None));
    }

    #[test]
    fn integers_keep_their_range_and_name() {
        let w = words(&[b"0", b"x"]);
        let mut c = ArgCursor::new(&w, 0);
        assert_eq!(
            c.next_int(1, 10, "COUNT"),
            Err(EmqError::Syntax(
                "COUNT must be an integer from 1 to 10".into()
            ))
        );
        assert!(c.next_int(0, 10, "BLOCK").is_err());
        assert!(c.done());
    }

    #[test]
    fn a_last_option_is_nothing_or_exactly_the_pair() {
        let w = words(&[b"q", b"result", b"ok"]);
        assert_eq!(
            ArgCursor::new(&w, 1).last_option("RESULT"),
            Some(Some(&b"ok"[..]))
        );
        assert_eq!(ArgCursor::new(&w, 3).last_option("RESULT"), Some(None));
        assert_eq!(ArgCursor::new(&w, 0).last_option("RESULT"), None);
        assert_eq!(ArgCursor::new(&w, 1).last_option("COUNT"), None);
        assert_eq!(ArgCursor::new(&w, 2).last_option("RESULT"), None);
    }

    #[test]
    fn a_last_bytes_option_names_itself_when_refused() {
        let w = words(&[b"q", b"PROGRESS", b"half"]);
        let refused = EmqError::Syntax("syntax error: expected PROGRESS <bytes>".into());
        for (at, want) in [
            (1, Ok(Some(&b"half"[..]))),
            (3, Ok(None)),
            (2, Err(refused)),
        ] {
            assert_eq!(
                ArgCursor::new(&w, at).last_bytes("PROGRESS"),
                want,
                "at {at}"
            );
        }
    }

    #[test]
    fn bytes_are_bounded_as_a_payload() {
        let w = words(&[b"boom"]);
        assert_eq!(ArgCursor::new(&w, 0).next_bytes(), Ok(&b"boom"[..]));
        assert_eq!(ArgCursor::new(&w, 1).next_bytes(), Err(lacks_value()));
    }
}
