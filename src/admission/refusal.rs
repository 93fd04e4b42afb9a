//! Every "not now" the server says, as one `Refusal`, and the one place a refusal becomes a
//! status, a code, a message and a `Retry-After` (`From<Refusal> for ApiError`).

use crate::error::{ApiError, Code};

/// Why a connection, a stream or a request is not taken now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// This instance holds as many connections as it can (503).
    ConnectionsFull,
    /// The client holds its share of this instance's connections (429).
    ConnectionShare { limit: usize },
    /// This instance holds as many event streams as it can (503).
    StreamsFull,
    /// The client holds its share of this instance's event streams (429).
    StreamShare { limit: usize },
    /// The user or API token holds as many streams as it may, on every instance together
    /// (429 `too_many_streams`).
    PrincipalStreams { limit: usize },
    /// The password-hashing queue, or the client's share of it, is full (429, retry in 1 s).
    HashQueue,
    /// A budget or rate limit is spent for `wait` seconds (429): what it limits, as the user
    /// reads it (`None`: the generic message).
    Budget {
        wait: u64,
        what: Option<&'static str>,
    },
}

/// Seconds after which a refused connection or stream may try again.
const RETRY: u64 = 5;
/// Seconds after which a stream refused for its user's or token's limit may try again.
const PRINCIPAL_RETRY: u64 = 3;

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::ConnectionsFull => ApiError::new(Code::Unavailable)
                .message("The server holds as many connections as it can; try again shortly."),
            Refusal::ConnectionShare { limit } => ApiError::rate_limited(RETRY).message(format!(
                "This client address holds as many connections as one client may ({limit}); \
                 try again shortly."
            )),
            Refusal::StreamsFull => ApiError::new(Code::Unavailable).message(
                "This server has as many event streams open as it can hold; try again shortly.",
            ),
            Refusal::StreamShare { limit } => ApiError::rate_limited(RETRY).message(format!(
                "One client address may hold at most {limit} of this server's event streams; \
                 close one first."
            )),
            Refusal::PrincipalStreams { limit } => {
                let mut e = ApiError::new(Code::TooManyStreams).message(format!(
                    "At most {limit} event streams can be open at once for one user or API \
                     token; close one first."
                ));
                // A slot frees as soon as one of the holder's streams closes.
                e.retry_after = Some(PRINCIPAL_RETRY);
                e
            }
            Refusal::HashQueue => ApiError::rate_limited(1)
                .message("Too many sign-ins at once; try again in a second."),
            Refusal::Budget { wait, what: None } => ApiError::rate_limited(wait),
            Refusal::Budget {
                wait,
                what: Some(message),
            } => ApiError::rate_limited(wait).message(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Response;

    #[test]
    fn every_refusal_is_a_complete_answer_with_retry_after() {
        let cases = [
            (Refusal::ConnectionsFull, 503, "unavailable"),
            (Refusal::ConnectionShare { limit: 3 }, 429, "rate_limited"),
            (Refusal::StreamsFull, 503, "unavailable"),
            (Refusal::StreamShare { limit: 3 }, 429, "rate_limited"),
            (Refusal::HashQueue, 429, "rate_limited"),
            (
                Refusal::Budget {
                    wait: 30,
                    what: Some("x"),
                },
                429,
                "rate_limited",
            ),
        ];
        for (refusal, status, code) in cases {
            let e = ApiError::from(refusal.clone());
            let r = Response::from_error(&e);
            assert_eq!(r.status, status, "{refusal:?}");
            assert_eq!(e.code.as_str(), code, "{refusal:?}");
            assert!(
                r.headers.iter().any(|(n, _)| n == "Retry-After"),
                "{refusal:?}"
            );
        }
        let e = ApiError::from(Refusal::PrincipalStreams { limit: 10 });
        assert_eq!(e.code.as_str(), "too_many_streams");
        assert_eq!(e.retry_after, Some(3));
    }
}
