//! A refused event stream, answered so that a browser's `EventSource` survives it. An
//! `EventSource` never retries after a non-200 answer: a console tab refused once (the
//! per-user/token limit, the instance's capacity, the address's share) would show no live changes
//! until it is reloaded. So a stream request that accepts `text/event-stream` is answered
//! `200 text/event-stream` with `retry: <ms>` (from the `Retry-After` it would have had, at least
//! a second), an `event: refused` whose data is the usual error body, and the end of the stream:
//! the browser waits that long, retries on its own, and gets in once a slot frees. Other requests
//! keep their 429 or 503.

use serde_json::json;

use super::Response;

/// The `event: refused` answer for a refusal (`status`, `code`, `message`, `retry_after` in
/// seconds), or `None` when the request (its `Accept` header) does not take an event stream.
pub fn as_event_stream(
    status: u16,
    code: &str,
    message: &str,
    retry_after: Option<u64>,
    accept: Option<&str>,
) -> Option<Response> {
    if !matches!(status, 429 | 503) || !accepts_event_stream(accept?) {
        return None;
    }
    let secs = retry_after.unwrap_or(1).max(1);
    let data = json!({ "error": { "code": code, "message": message } });
    let body = format!(
        "retry: {}\nevent: refused\ndata: {data}\n\n",
        secs.saturating_mul(1000)
    );
    Some(Response {
        status: 200,
        headers: vec![
            ("Content-Type".into(), "text/event-stream".into()),
            ("Cache-Control".into(), "no-cache".into()),
            ("Retry-After".into(), secs.to_string()),
        ],
        body: body.into_bytes(),
    })
}

/// Whether an `Accept` header names `text/event-stream` (or `text/*`) with a non-zero quality;
/// `*/*` alone does not count (a generic client gets the plain status).
fn accepts_event_stream(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let zero = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (media == "text/event-stream" || media == "text/*") && !zero
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_source_gets_retry_refused_and_the_end() {
        let r = as_event_stream(
            429,
            "too_many_streams",
            "At most 10.",
            Some(3),
            Some("text/event-stream"),
        )
        .unwrap();
        assert_eq!(r.status, 200);
        let body = String::from_utf8(r.body).unwrap();
        assert_eq!(
            body,
            "retry: 3000\nevent: refused\ndata: \
             {\"error\":{\"code\":\"too_many_streams\",\"message\":\"At most 10.\"}}\n\n"
        );
        let r = as_event_stream(503, "unavailable", "m", None, Some("text/event-stream")).unwrap();
        assert!(String::from_utf8(r.body)
            .unwrap()
            .starts_with("retry: 1000\n"));
    }

    #[test]
    fn other_requests_and_statuses_keep_the_plain_answer() {
        for accept in [
            None,
            Some("application/json"),
            Some("*/*"),
            Some("text/event-stream;q=0"),
        ] {
            assert!(as_event_stream(429, "rate_limited", "m", Some(5), accept).is_none());
        }
        assert!(
            as_event_stream(401, "unauthorized", "m", None, Some("text/event-stream")).is_none()
        );
        assert!(as_event_stream(
            429,
            "rate_limited",
            "m",
            Some(5),
            Some("application/json, text/event-stream; q=0.5")
        )
        .is_some());
    }
}
