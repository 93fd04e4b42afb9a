//! The LISTEN task: one tokio-postgres connection on `consoled_change`, driven by polling its
//! messages; every notification is routed to the hub inline (routing never waits). When the
//! connection is lost it reconnects with backoff and tells every stream to `resync`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::oneshot;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::hub::Hub;

/// The channel `consoled_notify_change` notifies (see consoled's first migration).
pub const CHANNEL: &str = "consoled_change";

/// Runs forever; `ready` fires once the first LISTEN is in place.
pub async fn run(url: String, hub: Arc<Hub>, ready: oneshot::Sender<()>) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let started = Instant::now();
        if let Err(e) = listen(&url, &hub, &mut ready).await {
            eprintln!("async-ref: change listener: {e}");
        }
        if started.elapsed() > Duration::from_secs(5) {
            backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn listen(
    url: &str,
    hub: &Hub,
    ready: &mut Option<oneshot::Sender<()>>,
) -> Result<(), tokio_postgres::Error> {
    // `client` lives to the end of this function: dropping it would end the connection.
    let (client, mut connection) = tokio_postgres::connect(url, NoTls).await?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let statement = format!("LISTEN {CHANNEL}");
    {
        // The connection only makes progress while it is polled, so the LISTEN is sent while
        // the message stream is driven.
        let subscribe = client.batch_execute(&statement);
        tokio::pin!(subscribe);
        loop {
            tokio::select! {
                done = &mut subscribe => { done?; break; }
                msg = messages.next() => match msg {
                    Some(Ok(AsyncMessage::Notification(n))) => hub.route(n.payload()),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
            }
        }
    }
    hub.resync_all();
    if let Some(ready) = ready.take() {
        let _ = ready.send(());
    }
    while let Some(msg) = messages.next().await {
        match msg? {
            AsyncMessage::Notification(n) => hub.route(n.payload()),
            _ => continue,
        }
    }
    Ok(())
}
