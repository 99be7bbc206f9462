//! A listing's cursor over a partitioned queue's partitions ([`Queue::jobs`],
//! [`Queue::groups`]). An ordinary queue's cursor is the server's, passed as it is. A
//! partitioned queue's walk takes its partitions in turn, each page from one of them: the
//! caller starts at `"0"`, the cursor is then `"<index>:<inner>"` (`index` the partition, from
//! 0; `inner` the server's cursor there), a partition whose cursor comes back `"0"` is left for
//! `"<index+1>:0"`, and past the last partition the cursor is `"0"`. A partition that comes back
//! empty and finished is passed within the same call, so a page is empty only at the walk's
//! end. Each item is visited once in a walk while the sets do not change. The client checks
//! only a cursor's `<index>:` part: a cursor whose partition is not one of the queue's is
//! refused ([`Error::Argument`]) before anything is sent; the server checks the rest
//! (`EMQCURSOR`, [`Error::Cursor`]).

use std::fmt;
use std::future::Future;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::partition::name;
use crate::queue::Queue;

/// Where a walk over the partitions stands: partition `index`, at the server's cursor `inner`
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct At {
    pub index: u16,
    pub inner: String,
}

impl At {
    /// The cursor `cursor` of a walk over `width` partitions: `"0"` (the start), or
    /// `"<index>:<inner>"` with `index` written in decimal as a page writes it (no sign, no
    /// leading zero), below `width`, and some `inner` (what it is, the server checks). Anything
    /// else is [`Error::Argument`].
    pub(crate) fn parse(cursor: &str, width: u16) -> Result<At> {
        if cursor == "0" {
            return Ok(At {
                index: 0,
                inner: "0".to_string(),
            });
        }
        let malformed = || {
            Error::Argument(format!(
                "{cursor:?} is no cursor of a queue over {width} partitions: \"0\" to start, or \
                 \"<partition>:<cursor>\" as a page returned it"
            ))
        };
        let (index, inner) = cursor.split_once(':').ok_or_else(malformed)?;
        let written = !index.is_empty()
            && index.bytes().all(|b| b.is_ascii_digit())
            && (index == "0" || !index.starts_with('0'));
        let index = index
            .parse::<u16>()
            .ok()
            .filter(|i| written && *i < width && !inner.is_empty())
            .ok_or_else(malformed)?;
        Ok(At {
            index,
            inner: inner.to_string(),
        })
    }

    /// Where the walk goes after a page of this partition whose server's cursor came back
    /// `next`: on in this partition, to the start of the next, or `None` past the last.
    pub(crate) fn after(&self, next: String, width: u16) -> Option<At> {
        if next != "0" {
            return Some(At {
                index: self.index,
                inner: next,
            });
        }
        let index = self.index.checked_add(1).filter(|i| *i < width)?;
        Some(At {
            index,
            inner: "0".to_string(),
        })
    }
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.index, self.inner)
    }
}

/// One page of a walk over `width` partitions from `cursor`: `page(index, inner)` reads
/// partition `index` at the server's cursor `inner`, answering the server's next cursor and
/// the items. The walk's next cursor (`"0"` past the last partition) and the items; a partition
/// that comes back empty and finished is passed in the same call. A malformed cursor is refused
/// ([`Error::Argument`]) before `page` is called.
pub(crate) async fn walk<T, F, Fut>(
    cursor: &str,
    width: u16,
    mut page: F,
) -> Result<(String, Vec<T>)>
where
    F: FnMut(u16, String) -> Fut,
    Fut: Future<Output = Result<(String, Vec<T>)>>,
{
    let mut at = At::parse(cursor, width)?;
    loop {
        let (next, items) = page(at.index, at.inner.clone()).await?;
        let finished = next == "0";
        match at.after(next, width) {
            None => return Ok(("0".to_string(), items)),
            Some(then) if finished && items.is_empty() => at = then,
            Some(then) => return Ok((then.to_string(), items)),
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Queue<C> {
    /// One page of a listing from `cursor`: `page(queue, inner)` reads one ordinary queue at
    /// the server's cursor `inner`. An ordinary queue's page is its own, its cursor the
    /// server's; a partitioned queue's is walked over its partitions. A walk from `"0"`
    /// reads the width afresh (`EMQ.WIDTH`; the width given to a handle by
    /// [`Queue::knowing_width`] stands), so a walk started after a span or an unspan sees it;
    /// the pages after it go on by the width known (asked when this handle has none). Public
    /// for a listing the client has no call for (the console's `EMQ.JOBS ... PREVIEW`).
    ///
    /// A cursor whose partition is not one of the queue's is refused ([`Error::Argument`])
    /// before anything is sent (but the `EMQ.WIDTH` a handle that knows no width reads first):
    /// the client checks only the cursor's `<partition>:` part, the server the rest
    /// (`EMQCURSOR`, [`Error::Cursor`]). A user not allowed `EMQ.WIDTH` (or a server without it)
    /// reads width 0: an ordinary queue, its cursors the server's.
    pub async fn listing<T, F, Fut>(&self, cursor: &str, page: F) -> Result<(String, Vec<T>)>
    where
        F: Fn(Queue<C>, String) -> Fut,
        Fut: Future<Output = Result<(String, Vec<T>)>>,
    {
        let width = match cursor {
            "0" => self.current_width().await?,
            _ => self.resolved_width().await?,
        };
        if width == 0 {
            return page(self.clone(), cursor.to_string()).await;
        }
        let page = &page;
        walk(cursor, width, |index, inner| async move {
            let part = name(&self.name, index, width).ok_or_else(|| {
                Error::Argument(format!(
                    "no partition {index} of {:?} over {width}",
                    self.name
                ))
            })?;
            page(self.at(part), inner).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_zero_or_a_partition_below_the_width_and_the_server_s_cursor_there() {
        let at = |index, inner: &str| At {
            index,
            inner: inner.to_string(),
        };
        assert_eq!(At::parse("0", 4).unwrap(), at(0, "0"));
        assert_eq!(At::parse("0:0", 4).unwrap(), at(0, "0"));
        assert_eq!(At::parse("3:17", 4).unwrap(), at(3, "17"));
        // The server's jobs cursor has a colon of its own: the first one splits.
        assert_eq!(
            At::parse("2:0:JOB0KHTOWnGLuC", 4).unwrap(),
            at(2, "0:JOB0KHTOWnGLuC")
        );
        assert_eq!(at(2, "0:JOB0KHTOWnGLuC").to_string(), "2:0:JOB0KHTOWnGLuC");
        for bad in [
            "", "1", "4:0", "9:0", ":0", "1:", "-1:0", "+1:0", "01:0", "a:0", "1 :0", "65536:0",
        ] {
            assert!(
                matches!(At::parse(bad, 4), Err(Error::Argument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_finished_partition_leads_to_the_next_and_the_last_to_the_end() {
        let at = At {
            index: 1,
            inner: "5".to_string(),
        };
        assert_eq!(at.after("9".into(), 3).unwrap().to_string(), "1:9");
        assert_eq!(at.after("0".into(), 3).unwrap().to_string(), "2:0");
        assert_eq!(at.after("0".into(), 2), None);
    }

    /// A walk over `parts` (each partition's items, paged `count` at a time by offset, as
    /// `EMQ.GROUPS` pages): every cursor and page, to the end.
    async fn walked(parts: &[Vec<u32>], count: usize) -> Vec<(String, Vec<u32>)> {
        let width = parts.len() as u16;
        let mut pages = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let (next, items) = walk(&cursor, width, |index, inner| {
                let items = &parts[usize::from(index)];
                async move {
                    let from: usize = inner.parse().expect("an offset");
                    let to = (from + count).min(items.len());
                    let next = if to == items.len() { 0 } else { to };
                    Ok((next.to_string(), items[from..to].to_vec()))
                }
            })
            .await
            .expect("a page");
            pages.push((next.clone(), items));
            if next == "0" {
                return pages;
            }
            cursor = next;
        }
    }

    #[tokio::test]
    async fn a_walk_visits_every_item_once_and_passes_empty_partitions() {
        let parts = vec![vec![1, 2, 3], vec![], vec![], vec![4, 5], vec![6], vec![]];
        let pages = walked(&parts, 2).await;
        let cursors: Vec<&str> = pages.iter().map(|(c, _)| c.as_str()).collect();
        // Partitions 1 and 2 passed in the call that reached 3; partition 5, empty, read last.
        assert_eq!(cursors, ["0:2", "1:0", "4:0", "5:0", "0"]);
        let items: Vec<u32> = pages.iter().flat_map(|(_, i)| i.clone()).collect();
        assert_eq!(items, [1, 2, 3, 4, 5, 6]);
        let (last, before) = pages.split_last().expect("pages");
        assert!(
            before.iter().all(|(_, items)| !items.is_empty()),
            "{pages:?}"
        );
        assert_eq!(last, &("0".to_string(), vec![]), "empty only at the end");
        // Nothing anywhere: one call, one empty page, the end.
        assert_eq!(
            walked(&[vec![], vec![], vec![]], 2).await,
            [("0".into(), vec![])]
        );
        // A malformed cursor is refused before any page is read.
        let mut read = 0;
        let refused = walk("7:0", 3, |_, _| {
            read += 1;
            async { Ok(("0".to_string(), Vec::<u32>::new())) }
        })
        .await;
        assert!(matches!(refused, Err(Error::Argument(_))));
        assert_eq!(read, 0);
    }
}
