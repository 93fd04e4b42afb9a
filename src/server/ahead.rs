//! Request heads read ahead of tiny_http's parser, so that a framing the parser would refuse
//! itself (with an empty 400) gets our JSON answer instead (`http::framing::check_before_parser`),
//! on a connection's first request and on every later one.
//!
//! The parser reads the socket through a 1 KiB buffer, so the bytes of the next head may already
//! sit in that buffer, out of sight. What makes them visible again is knowing where each request
//! ends on the wire: a head's length (seen here, whole) plus its `Content-Length`. With the
//! bytes the parser has taken off the socket (`ClientSocket::consumed`) that tells how many bytes
//! of the next head it holds; those were seen by an earlier look (`seen`), and the rest is on the
//! socket, where a look (`MSG_PEEK`) leaves it for the parser. A chunked body is followed through
//! the bytes seen of it. The parser reads only a head seen whole and screened: where the next
//! head's start is not known (a chunked body not seen whole, bytes the parser took before a look
//! saw them, a count that does not add up), the connection ends after what was answered.
//!
//! A look waits only where the parser is about to wait too: when the bytes it already holds do
//! not make a whole head. Under the guard's head deadline, as the parser's read is. A head that
//! arrives in pieces is looked at again as each piece arrives (`SO_RCVLOWAT` one byte past what
//! is queued, then `poll`), so a refusal hidden in a later piece is ours too.

use std::time::Duration;

use super::guard::head_refusal;
use super::head::{value_too_long, MAX_HEADER_VALUE};
use crate::error::{ApiError, Code};
use crate::http::framing::{self, Head};
use crate::os::ClientSocket;

/// A look's first size: most heads fit.
const LOOK: usize = 2048;
/// Most of a head looked at: the guard's limit; a head without its end by then is refused 431
/// here. A head seen whole is within it, so `guard::Entry::disarm` counts nothing for it.
const MOST: usize = super::guard::MAX_HEAD;

/// What becomes of the next head, looked at ahead of the parser.
pub enum Screened {
    /// Seen whole and framed as the parser frames it, or whole and for the parser to refuse (a
    /// malformed request line or header line): the parser reads it.
    Clear,
    /// Refused by us (framing, too long, or too slow): answered on the raw socket, and the
    /// connection ends.
    Refuse(ApiError),
    /// Where the next head starts is not known (after a chunked body we could not follow, or
    /// bytes the parser took before any look saw them), or the client sent nothing more: the
    /// connection ends after what was answered, and the parser reads no head we did not see.
    End,
}

/// What is known of a connection's bytes ahead of the parser.
pub struct ReadAhead {
    /// Where the next request's head starts on the wire, while every earlier request's end was
    /// known; `None` once it is not.
    next: Option<u64>,
    /// Bytes of the wire from `next` on, as far as a look has seen them.
    seen: Vec<u8>,
    /// The length of the head the last `screen` found whole.
    head: Option<usize>,
    /// Where the last request the parser returned ends on the wire, when known.
    end: Option<u64>,
    piece_wait: Duration,
}

/// Why a look stopped without a whole head.
enum Stop {
    /// Nothing to see: the client closed, sent nothing for the read time-out, or the guard shut
    /// the socket (it answered already).
    Unseen,
    /// Part of a head, and no more of it for the read time-out.
    Slow,
}

impl ReadAhead {
    /// At a connection's start: nothing has been read. `piece_wait`: how long to wait for the
    /// next piece of a head that comes in pieces (the read time-out).
    pub fn new(piece_wait: Duration) -> ReadAhead {
        ReadAhead {
            next: Some(0),
            seen: Vec::new(),
            head: None,
            end: None,
            piece_wait,
        }
    }

    /// Before the parser reads the next head from `socket`: whether it may. Never inlined: the
    /// connection's thread may become a stream's, whose stack stays small only if what ran
    /// before it left no large frame behind.
    #[inline(never)]
    pub fn screen(&mut self, socket: ClientSocket) -> Screened {
        self.head = None;
        let (Ok(screened) | Err(screened)) = self.see_head(socket).and_then(|()| self.check_head());
        // Past anything but a head seen whole and clear, where the next one starts is not known.
        if !matches!(screened, Screened::Clear) || self.head.is_none() {
            self.lose();
        }
        screened
    }

    /// Sees the next head whole in `seen`, ahead of the parser, within `MOST` bytes; else says
    /// what becomes of it.
    fn see_head(&mut self, socket: ClientSocket) -> Result<(), Screened> {
        let next = self.next.ok_or(Screened::End)?;
        // Bytes of the next head the parser already holds: seen by an earlier look, or lost.
        // (Before the first head it has read nothing.)
        let held = match next {
            0 => Some(0),
            _ => socket
                .consumed()
                .ok()
                .and_then(|c| c.checked_sub(next))
                .map(|h| h as usize)
                .filter(|h| *h <= self.seen.len()),
        };
        let held = held.ok_or(Screened::End)?;
        if framing::head_end(&self.seen[..held]).is_none() {
            // The parser needs more of the socket: look at what it will read (again, for bytes
            // an earlier look saw still queued).
            self.seen.truncate(held);
            self.look(socket, held).map_err(|stop| match stop {
                Stop::Unseen => Screened::End,
                Stop::Slow => Screened::Refuse(head_refusal(Code::RequestTimeout)),
            })?;
        }
        match framing::head_end(&self.seen) {
            Some(len) if len <= MOST => Ok(()),
            // No end within the limit, or past it.
            _ => Err(Screened::Refuse(head_refusal(Code::HeaderTooLarge))),
        }
    }

    /// A head seen whole: refused here for what the parser would refuse itself, for its
    /// framing, or for a header value over 8 KiB (any header, not only those the application
    /// reads: `head::read_request`).
    fn check_head(&mut self) -> Result<Screened, Screened> {
        let Some(head) = framing::raw_head(&self.seen) else {
            // Whole but not readable to us (a malformed line): the parser refuses it, and its
            // answer ends the connection.
            return Ok(Screened::Clear);
        };
        self.head = Some(head.len);
        if head.lines.iter().any(|(_, v)| v.len() > MAX_HEADER_VALUE) {
            return Err(Screened::Refuse(value_too_long()));
        }
        framing::check_before_parser(&Head::of(head.version, &head.lines))
            .map(|()| Screened::Clear)
            .map_err(Screened::Refuse)
    }

    /// Looks at what the socket holds behind the `held` bytes (into `seen`), until a head is
    /// whole there or `MOST` bytes are seen. A head that comes in pieces is waited for piece by
    /// piece, as the parser would wait: at most the read time-out for each, and the guard's head
    /// deadline for all (it shuts the socket, which ends the wait).
    fn look(&mut self, socket: ClientSocket, held: usize) -> Result<(), Stop> {
        let Some(most) = MOST.checked_sub(held).filter(|m| *m > 0) else {
            return Ok(());
        };
        let mut room = LOOK.min(most);
        let mut before = 0;
        loop {
            self.seen.resize(held + room, 0);
            let got = socket.peek(&mut self.seen[held..]);
            let n = *got.as_ref().unwrap_or(&0);
            self.seen.truncate(held + n);
            match got {
                Ok(0) => return Err(Stop::Unseen),
                // The read time-out, with part of a head: slow; with nothing: silent.
                Err(_) if held + before > 0 => return Err(Stop::Slow),
                Err(_) => return Err(Stop::Unseen),
                Ok(_) => {}
            }
            if framing::head_end(&self.seen).is_some() || n >= most {
                return Ok(());
            }
            if n == room {
                // More is queued than was looked at: look further at once.
                room = (room * 2).min(most);
                continue;
            }
            // Nothing new since the last piece: the socket was shut (by the guard, which
            // answered, or the client).
            if n == before {
                return Err(Stop::Unseen);
            }
            before = n;
            if !socket.wait_for_more(n, self.piece_wait) {
                return Err(Stop::Slow);
            }
        }
    }

    /// Whether the last `screen` saw the head whole (so it is at most `MOST` bytes long).
    pub fn saw_head(&self) -> bool {
        self.head.is_some()
    }

    /// After the parser returned `rq` (the head `screen` looked at): where the next one starts.
    /// A chunked body is followed through what was seen of it; one that was not seen whole
    /// leaves the next head's start unknown.
    pub fn parsed(&mut self, rq: &tiny_http::Request) {
        self.end = None;
        let (Some(next), Some(head)) = (self.next, self.head.take()) else {
            self.lose();
            return;
        };
        let body = if rq.headers().get("Transfer-Encoding").is_some() {
            framing::chunked_len(self.seen.get(head..).unwrap_or_default())
        } else {
            Some(rq.body_length().unwrap_or(0))
        };
        let Some(body) = body else {
            self.lose();
            return;
        };
        let len = head + body;
        self.end = Some(next + len as u64);
        if last_of_its_connection(rq) {
            self.lose();
            return;
        }
        self.next = self.end;
        if len >= self.seen.len() {
            // Nothing seen ahead of the next request: nothing kept (a stream lives long).
            self.seen = Vec::new();
        } else {
            self.seen.drain(..len);
        }
    }

    /// Whether the parser took bytes off `socket` past the end of the last request it
    /// returned: a request sent right behind it (in the same packet), now in its buffer.
    pub fn read_past_end(&self, socket: ClientSocket) -> bool {
        self.end
            .is_some_and(|end| socket.consumed_past(end).unwrap_or(false))
    }

    fn lose(&mut self) {
        self.next = None;
        self.seen = Vec::new();
    }
}

/// Whether no request is read after `rq`: tiny_http_fork's rule (`Connection: close` or
/// `upgrade`, or HTTP/1.0 without `keep-alive`; a look would then wait for nothing), and ours:
/// HTTP/1.0 with `Transfer-Encoding`, whose framing cannot be trusted (RFC 9112 §6.1).
fn last_of_its_connection(rq: &tiny_http::Request) -> bool {
    let connection = rq
        .headers()
        .get("Connection")
        .map(|v| v.as_str().to_ascii_lowercase());
    let old = *rq.http_version() == tiny_http::HTTPVersion(1, 0);
    if old && rq.headers().get("Transfer-Encoding").is_some() {
        return true;
    }
    match connection {
        Some(c) if c.contains("close") || c.contains("upgrade") => true,
        Some(c) => old && !c.contains("keep-alive"),
        None => old,
    }
}
