//! Bearer API tokens, checked the way consoled checks them: SHA-256 of the secret looked up in
//! consoled's `api_tokens` table (live, not revoked), once per stream. One shared tokio-postgres
//! connection serves every lookup (its requests are pipelined); it is reopened when it breaks.

use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls, Statement};

const FIND: &str = "SELECT project_id FROM api_tokens \
                    WHERE token_hash = sha256(convert_to($1, 'UTF8')) AND revoked_at IS NULL";

/// Token secrets carry this prefix; anything else is not looked up.
const PREFIX: &str = "csd_";

pub enum Denied {
    Unauthorized,
    Unavailable,
}

pub struct Auth {
    url: String,
    conn: Mutex<Option<Arc<(Client, Statement)>>>,
}

impl Auth {
    pub fn new(url: String) -> Auth {
        Auth {
            url,
            conn: Mutex::new(None),
        }
    }

    /// The project of a live token, from an `Authorization` header value.
    pub async fn project(&self, header: Option<&str>) -> Result<i64, Denied> {
        let secret = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|s| s.starts_with(PREFIX))
            .ok_or(Denied::Unauthorized)?;
        let conn = self.connection().await.ok_or(Denied::Unavailable)?;
        match conn.0.query_opt(&conn.1, &[&secret]).await {
            Ok(Some(row)) => Ok(row.get(0)),
            Ok(None) => Err(Denied::Unauthorized),
            Err(e) => {
                eprintln!("async-ref: token lookup: {e}");
                Err(Denied::Unavailable)
            }
        }
    }

    async fn connection(&self) -> Option<Arc<(Client, Statement)>> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.0.is_closed()) {
            return Some(c.clone());
        }
        let (client, connection) = match tokio_postgres::connect(&self.url, NoTls).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("async-ref: database: {e}");
                return None;
            }
        };
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("async-ref: database connection: {e}");
            }
        });
        let statement = client.prepare(FIND).await.ok()?;
        let conn = Arc::new((client, statement));
        *slot = Some(conn.clone());
        Some(conn)
    }
}
