//! Statements, prepared once per pooled connection and kept.
//!
//! The `postgres` crate prepares a statement afresh for every `query` given as text: a round
//! trip to parse and describe it, and PostgreSQL plans it again each time. For our short,
//! indexed statements that planning was most of the database's work: the three statements of
//! `GET /auth/session` took 550 µs of PostgreSQL CPU prepared each time and 153 µs prepared once
//! (measured on the benchmark machine; BENCHMARKS.md). So every pooled connection keeps the
//! statements it has prepared, by their text, for its life.
//!
//! `Sql` is what the table modules ask of a connection. It is implemented by the pooled
//! connection (`Db`) and its transactions (`Tx`), which use the kept statements, and by the
//! crate's own `Client` and `Transaction` (the dedicated connections of the listener, the mail
//! sender and the commands), which prepare as before.
//!
//! Behind a transaction-mode PgBouncer older than 1.21 a named statement cannot be kept: the next
//! transaction may run on another server connection, where it does not exist (or where another
//! client's statement has the name). With `CONSOLED_DB_KEEP_STATEMENTS=false` the pool sends each
//! statement unnamed with its parameter types (`query_typed`: parse, bind and execute in one round
//! trip; PostgreSQL plans it every time, which is the cost). The types are learnt once per
//! statement text and process from the direct connection (`Describer`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use postgres::types::{ToSql, Type};
use postgres::{Client, Error, Row, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;

/// Statements kept per connection at most (we have about a hundred).
const MAX_KEPT: usize = 512;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The statements a table module runs, on whatever connection it is given.
pub trait Sql {
    fn query(&mut self, sql: &str, params: Params) -> Result<Vec<Row>, Error>;
    fn query_opt(&mut self, sql: &str, params: Params) -> Result<Option<Row>, Error>;
    fn query_one(&mut self, sql: &str, params: Params) -> Result<Row, Error>;
    fn execute(&mut self, sql: &str, params: Params) -> Result<u64, Error>;
}

/// Statements prepared on one connection, by their text, and whether its server refused a
/// write as read-only (then the connection must not serve again: `Manager::has_broken`).
#[derive(Default)]
struct Kept {
    statements: HashMap<String, Statement>,
    read_only: bool,
}

impl Kept {
    fn get(
        &mut self,
        client: &mut impl postgres::GenericClient,
        sql: &str,
    ) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        // Our statements are a fixed set; a bound keeps a mistake (text built from values) from
        // growing the map without end.
        if self.statements.len() < MAX_KEPT {
            self.statements.insert(sql.to_string(), statement.clone());
        }
        Ok(statement)
    }

    /// A kept statement that failed may be stale (the schema changed under it): prepare it
    /// again next time.
    fn failed<T>(&mut self, sql: &str, result: Result<T, Error>) -> Result<T, Error> {
        if result.is_err() {
            self.statements.remove(sql);
        }
        self.note(result)
    }

    /// Marks the connection when its server turned read-only under it (a primary demoted or
    /// fenced during a failover): it is dropped when it returns to the pool, and the next one
    /// is made to a writable server.
    fn note<T>(&mut self, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &result {
            self.read_only |= crate::error::is_read_only(e);
        }
        result
    }
}

/// Parameter types by statement text, learnt on a direct connection (never through the pool:
/// preparing there is what breaks), for a pool that sends its statements unnamed.
pub struct Describer {
    target: super::Target,
    state: Mutex<Described>,
}

/// The describer's connection (made when first needed) and what it learnt.
type Described = (Option<Client>, HashMap<String, Arc<[Type]>>);

impl Describer {
    /// Describes statements on connections made to `target` (the direct URL).
    pub fn new(target: super::Target) -> Describer {
        Describer {
            target,
            state: Mutex::new((None, HashMap::new())),
        }
    }

    fn types(&self, sql: &str) -> Result<Arc<[Type]>, Error> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(types) = state.1.get(sql) {
            return Ok(types.clone());
        }
        if state.0.as_ref().is_none_or(|c| c.is_closed()) {
            state.0 = Some(self.target.pg.connect(self.target.tls.clone())?);
        }
        let client = state.0.as_mut().expect("connected above");
        // In a transaction, so that the statement is closed on the same server connection even
        // if the direct URL is a pooler after all.
        let mut tx = client.transaction()?;
        let statement = tx.prepare(sql)?;
        let types: Arc<[Type]> = statement.params().into();
        drop(statement);
        tx.rollback()?;
        if state.1.len() < MAX_KEPT {
            state.1.insert(sql.to_string(), types.clone());
        }
        Ok(types)
    }
}

/// `params` with their types, for `query_typed`.
fn typed<'a>(params: Params<'a>, types: &[Type]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params.iter().copied().zip(types.iter().cloned()).collect()
}

/// A pooled connection and the statements prepared on it.
pub struct Db {
    client: Client,
    kept: Kept,
    /// Set when statements are sent unnamed instead of kept.
    unnamed: Option<Arc<Describer>>,
}

/// A transaction of a pooled connection; it uses (and adds to) the connection's statements.
pub struct Tx<'a> {
    tx: Transaction<'a>,
    kept: &'a mut Kept,
    unnamed: Option<Arc<Describer>>,
}

impl Db {
    pub fn transaction(&mut self) -> Result<Tx<'_>, Error> {
        Ok(Tx {
            tx: self.client.transaction()?,
            kept: &mut self.kept,
            unnamed: self.unnamed.clone(),
        })
    }

    /// Queries as text, without parameters or kept statements (health checks).
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<postgres::SimpleQueryMessage>, Error> {
        self.client.simple_query(sql)
    }
}

impl Tx<'_> {
    pub fn commit(self) -> Result<(), Error> {
        self.tx.commit()
    }
}

/// Runs `$call` with the kept statement for `$sql` on `$client`, forgetting it if it fails.
macro_rules! kept {
    ($kept:expr, $client:expr, $sql:expr, $call:ident, $params:expr) => {{
        let statement = $kept.get(&mut $client, $sql)?;
        let result = $client.$call(&statement, $params);
        $kept.failed($sql, result)
    }};
}

/// Runs `$call` on a kept statement, or `$typed` unnamed when the pool keeps none.
macro_rules! run {
    ($self:ident, $client:ident, $sql:expr, $call:ident, $typed:ident, $params:expr) => {{
        match &$self.unnamed {
            None => kept!($self.kept, $self.$client, $sql, $call, $params),
            Some(describer) => {
                let types = describer.types($sql)?;
                let result = $self.$client.$typed($sql, &typed($params, &types));
                $self.kept.note(result)
            }
        }
    }};
}

/// `Sql` through the kept statements (or unnamed ones), for a type whose client is `$client`.
macro_rules! sql_with_kept_statements {
    ($t:ty, $client:ident) => {
        impl Sql for $t {
            fn query(&mut self, sql: &str, params: Params) -> Result<Vec<Row>, Error> {
                run!(self, $client, sql, query, query_typed, params)
            }
            fn query_opt(&mut self, sql: &str, params: Params) -> Result<Option<Row>, Error> {
                run!(self, $client, sql, query_opt, query_typed_opt, params)
            }
            fn query_one(&mut self, sql: &str, params: Params) -> Result<Row, Error> {
                run!(self, $client, sql, query_one, query_typed_one, params)
            }
            fn execute(&mut self, sql: &str, params: Params) -> Result<u64, Error> {
                run!(self, $client, sql, execute, execute_typed, params)
            }
        }
    };
}

sql_with_kept_statements!(Db, client);
sql_with_kept_statements!(Tx<'_>, tx);

/// The crate's own connections and transactions prepare every time (as before).
macro_rules! prepared_each_time {
    ($t:ty) => {
        impl Sql for $t {
            fn query(&mut self, sql: &str, params: Params) -> Result<Vec<Row>, Error> {
                postgres::GenericClient::query(self, sql, params)
            }
            fn query_opt(&mut self, sql: &str, params: Params) -> Result<Option<Row>, Error> {
                postgres::GenericClient::query_opt(self, sql, params)
            }
            fn query_one(&mut self, sql: &str, params: Params) -> Result<Row, Error> {
                postgres::GenericClient::query_one(self, sql, params)
            }
            fn execute(&mut self, sql: &str, params: Params) -> Result<u64, Error> {
                postgres::GenericClient::execute(self, sql, params)
            }
        }
    };
}

prepared_each_time!(Client);
prepared_each_time!(Transaction<'_>);

/// The pool's connection manager: r2d2_postgres's, with the kept statements beside each client
/// (or the describer, when statements are sent unnamed).
pub struct Manager(
    pub PostgresConnectionManager<super::tls::Tls>,
    pub Option<Arc<Describer>>,
);

/// Why the pool could not make or hand out a connection.
#[derive(Debug)]
pub enum Unusable {
    Db(Error),
    /// The server takes no writes (a standby, or a primary demoted or fenced).
    ReadOnly,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::Db(e) => write!(f, "{}", super::health::cause(e)),
            Unusable::ReadOnly => f.write_str("the database server is read-only now"),
        }
    }
}

impl std::error::Error for Unusable {}

impl r2d2::ManageConnection for Manager {
    type Connection = Db;
    type Error = Unusable;

    /// Reports to `health` (the pool's own error handler, which logged every failed attempt,
    /// is off).
    fn connect(&self) -> Result<Db, Unusable> {
        match self.0.connect() {
            Ok(client) => {
                super::health::ok();
                Ok(Db {
                    client,
                    kept: Kept::default(),
                    unnamed: self.1.clone(),
                })
            }
            Err(e) => {
                super::health::failed("pool", &super::health::cause(&e));
                Err(Unusable::Db(e))
            }
        }
    }

    /// The check on every checkout, one round trip as before (it was an empty query): a
    /// connection whose server is read-only now (a primary demoted or fenced while it sat in
    /// the pool) is not handed out but dropped.
    fn is_valid(&self, db: &mut Db) -> Result<(), Unusable> {
        if super::read_only(&mut db.client).map_err(Unusable::Db)? {
            db.kept.read_only = true;
            return Err(Unusable::ReadOnly);
        }
        Ok(())
    }

    fn has_broken(&self, db: &mut Db) -> bool {
        db.kept.read_only || self.0.has_broken(&mut db.client)
    }
}
