//! Security events of an account (a password changed, sessions ended by their owner): one log
//! line each, at `info`, with the user and the client's address, so that an operator can answer
//! "who did what to this account, from where". Never a password or token: callers pass only
//! the event's name and counts.

use crate::app::App;
use crate::http::Request;

/// Logs one security event of `user_id`, caused by `req`; `detail` is `key=value` pairs.
pub fn security_event(app: &App, req: &Request, user_id: i64, event: &str, detail: &str) {
    let client = super::seen(app, req).address;
    let client = client.as_deref().unwrap_or("unknown");
    log::info!("security event={event} user_id={user_id} client={client} {detail}");
}
