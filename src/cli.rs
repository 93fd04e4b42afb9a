//! Command line: `serve` (default), `migrate`, `project create`, `token create|list|revoke`,
//! `keys generate|rotate`, `mfa reset`, `user find|show|disable|enable|signout|delete`,
//! `org suspend|resume`, `invitation create`, `emit`,
//! `--version`. Every command reads DATABASE_URL and
//! prints JSON on stdout. The arguments are checked (and `--help`, `--version` answered) before the
//! configuration is read, so a typo never waits on a database. Only `serve` and `migrate` change
//! the schema: the other commands refuse a database whose migrations are behind this binary, so
//! that running a new binary's command during a rolling upgrade never migrates production as a
//! side effect.

mod commands;
mod keys;
mod teams;
mod users;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::Config;
use crate::db::{self, orgs, tokens};
use crate::failure::Failure;

pub use commands::{Command, CHANGE_OPS, CHANGE_TYPES, COMMANDS};

/// What the arguments ask for.
pub enum Invocation {
    /// Print this on stdout and exit 0 (help, and `keys generate`, which needs no settings).
    Help(String),
    Serve,
    Run(&'static Command, HashMap<String, String>),
}

/// Reads the arguments (without the program name). Errors name the fix.
pub fn parse(args: &[String]) -> Result<Invocation, String> {
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .take_while(|a| !a.starts_with('-'))
        .collect();
    let rest = &args[words.len()..];
    if rest.iter().any(|a| a == "--version" || a == "-V") {
        return Ok(Invocation::Help(format!(
            "consoled {}\n",
            env!("CARGO_PKG_VERSION")
        )));
    }
    let wants_help = rest.iter().any(|a| a == "--help" || a == "-h");
    match words.as_slice() {
        [] if wants_help => return Ok(Invocation::Help(commands::overview())),
        ["help"] => return Ok(Invocation::Help(commands::overview())),
        ["help", topic @ ..] => {
            return commands::find(topic)
                .map(|c| Invocation::Help(commands::help(c)))
                .ok_or_else(|| unknown_command(topic));
        }
        _ => {}
    }
    let words = if words.is_empty() {
        vec!["serve"]
    } else {
        words
    };
    let command = commands::find(&words).ok_or_else(|| unknown_command(&words))?;
    if wants_help {
        return Ok(Invocation::Help(commands::help(command)));
    }
    let flags = parse_flags(command, rest)?;
    if command.words == ["serve"] {
        return Ok(Invocation::Serve);
    }
    if command.words == ["keys", "generate"] {
        return Ok(Invocation::Help(format!("{}\n", keys::generate())));
    }
    if command.words == ["emit"] {
        check_emit(&flags)?;
    }
    Ok(Invocation::Run(command, flags))
}

fn unknown_command(words: &[&str]) -> String {
    let known: Vec<&str> = COMMANDS.iter().map(|c| c.synopsis).collect();
    format!(
        "unknown command {:?}; usage:\n  {}\n(consoled --help describes each)",
        words.join(" "),
        known.join("\n  ")
    )
}

/// Runs a parsed command; `Ok(json)` is printed by main, a failure exits with its status.
pub fn run(
    config: &Config,
    command: &Command,
    flags: &HashMap<String, String>,
) -> Result<Value, Failure> {
    match command.words {
        ["migrate"] => {
            let applied = crate::migrate(config, Duration::from_secs(30))?;
            Ok(json!({ "applied": applied }))
        }
        ["project", "create"] => project_create(config, flags),
        ["token", "create"] => token_create(config, flags),
        ["token", "list"] => token_list(config, flags),
        ["token", "revoke"] => token_revoke(config, flags),
        ["keys", "rotate"] => keys::rotate(config),
        ["mfa", "reset"] => keys::mfa_reset(config, flags),
        ["user", "find"] => users::find(config, flags),
        ["user", "show"] => users::show(config, flags),
        ["user", "disable"] => users::set_disabled(config, flags, true),
        ["user", "enable"] => users::set_disabled(config, flags, false),
        ["user", "signout"] => users::signout(config, flags),
        ["user", "delete"] => users::delete(config, flags),
        ["org", "suspend"] => teams::suspend(config, flags),
        ["org", "resume"] => teams::resume(config, flags),
        ["invitation", "create"] => teams::invite(config, flags),
        ["emit"] => emit(config, flags),
        _ => Err(unknown_command(command.words).into()),
    }
}

/// `--name VALUE` pairs: only the command's own options, each once, the required ones present.
fn parse_flags(command: &Command, args: &[String]) -> Result<HashMap<String, String>, String> {
    let synopsis = command.synopsis;
    let mut flags = HashMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}; usage: {synopsis}"))?;
        if !command.options.iter().any(|o| o.0 == name) {
            let known: Vec<String> = command
                .options
                .iter()
                .map(|o| format!("--{}", o.0))
                .collect();
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            return Err(format!(
                "unknown option --{name} for `{}`; its options: {known}; usage: {synopsis}",
                command.words.join(" ")
            ));
        }
        let value = it
            .next()
            .ok_or_else(|| format!("--{name} needs a value; usage: {synopsis}"))?;
        if flags.insert(name.to_string(), value.clone()).is_some() {
            return Err(format!("--{name} is given twice"));
        }
    }
    for (name, required, _) in command.options {
        if *required && !flags.contains_key(*name) {
            return Err(format!("--{name} is required; usage: {synopsis}"));
        }
    }
    Ok(flags)
}

/// The type and op of `emit`, checked before any database work, with the allowed values.
fn check_emit(flags: &HashMap<String, String>) -> Result<(), String> {
    let kind = flags.get("type").map_or("", String::as_str);
    if !CHANGE_TYPES.contains(&kind) {
        let hint = CHANGE_TYPES
            .iter()
            .find(|t| !kind.is_empty() && t.starts_with(kind))
            .map_or(String::new(), |t| format!(" (did you mean {t}?)"));
        return Err(format!(
            "unknown type {kind:?}{hint}; --type is one of: {}",
            CHANGE_TYPES.join(", ")
        ));
    }
    let op = flags.get("op").map_or("", String::as_str);
    if !CHANGE_OPS.contains(&op) {
        return Err(format!(
            "unknown op {op:?}; --op is one of: {}",
            CHANGE_OPS.join(", ")
        ));
    }
    id_flag(flags, "id")?;
    opt_id_flag(flags, "project")?;
    opt_id_flag(flags, "org")?;
    Ok(())
}

fn id_flag(flags: &HashMap<String, String>, name: &str) -> Result<i64, String> {
    flags
        .get(name)
        .ok_or_else(|| format!("--{name} is required"))?
        .parse()
        .map_err(|_| format!("--{name} must be a number"))
}

fn opt_id_flag(flags: &HashMap<String, String>, name: &str) -> Result<Option<i64>, String> {
    flags.get(name).map(|_| id_flag(flags, name)).transpose()
}

/// A connection to a database whose schema this binary knows; never migrates.
pub(crate) fn connect(config: &Config) -> Result<postgres::Client, Failure> {
    let mut c = db::try_connect(config, "consoled-cli")?;
    let pending =
        db::migrate::pending(&mut c).map_err(|e| Failure::from(db::reach::describe(&e)))?;
    if !pending.is_empty() {
        return Err(Failure::from(format!(
            "the database schema is out of date: migrations {pending:?} of this binary are not \
             applied; run `consoled migrate` (with this binary) first, or use the binary that \
             matches the database (only `consoled serve` and `consoled migrate` apply migrations)"
        )));
    }
    Ok(c)
}

fn project_create(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let org_id = id_flag(flags, "org")?;
    let name = flags
        .get("name")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && s.chars().count() <= 100);
    let name = name.ok_or("--name is required (1 to 100 characters)")?;
    let mut c = connect(config)?;
    if !orgs::org_exists(&mut c, org_id).map_err(|e| e.to_string())? {
        return Err(format!("organization {org_id} does not exist").into());
    }
    let project = orgs::create_project(&mut c, org_id, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("organization {org_id} has a project named {name:?} already"))?;
    Ok(json!({ "id": project.id, "org_id": project.org_id, "name": project.name }))
}

fn token_create(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let project_id = id_flag(flags, "project")?;
    let name = flags.get("name").map(String::as_str).unwrap_or("");
    let scope = match flags.get("scope") {
        None => tokens::TokenScope::ReadWrite,
        Some(s) => tokens::TokenScope::parse(s).ok_or("--scope is read or read_write")?,
    };
    let expires_in = flags
        .get("expires-in")
        .map(|v| v.parse::<u64>().ok().filter(|&n| n > 0))
        .map(|n| n.ok_or("--expires-in is a whole number of seconds, at least 1"))
        .transpose()?;
    let mut c = connect(config)?;
    project_exists(&mut c, project_id)?;
    let issue = tokens::Issue {
        project_id,
        name,
        scope,
        expires_in: expires_in.map(|n| n as f64),
        created_by: None,
    };
    let (id, token) = tokens::issue(&mut c, &issue).map_err(|e| e.to_string())?;
    Ok(json!({ "id": id, "project_id": project_id, "token": token }))
}

fn project_exists(c: &mut postgres::Client, project_id: i64) -> Result<(), Failure> {
    match orgs::find_project(c, project_id).map_err(|e| e.to_string())? {
        Some(_) => Ok(()),
        None => Err(format!("project {project_id} does not exist").into()),
    }
}

/// Every token of a project with its name, id and times; never a secret (only hashes are
/// stored, and those are not shown either).
fn token_list(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let project_id = id_flag(flags, "project")?;
    let mut c = connect(config)?;
    project_exists(&mut c, project_id)?;
    let list = tokens::list_all(&mut c, project_id).map_err(|e| db::reach::describe(&e))?;
    Ok(json!({ "project_id": project_id, "tokens": list }))
}

fn token_revoke(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let id = id_flag(flags, "id")?;
    let mut c = connect(config)?;
    if !tokens::revoke(&mut c, id, None).map_err(|e| e.to_string())? {
        return Err(format!("no live token with id {id}").into());
    }
    Ok(json!({ "id": id, "revoked": true }))
}

fn emit(config: &Config, flags: &HashMap<String, String>) -> Result<Value, Failure> {
    let kind = flags.get("type").ok_or("--type is required")?;
    let op = flags.get("op").ok_or("--op is required")?;
    let id = id_flag(flags, "id")?;
    let project = opt_id_flag(flags, "project")?;
    let org = opt_id_flag(flags, "org")?;
    let mut c = connect(config)?;
    c.execute(
        "SELECT consoled_notify_change($1, $2, $3, $4, $5)",
        &[kind, &id, op, &project, &org],
    )
    .map_err(|e| {
        e.as_db_error()
            .map_or(e.to_string(), |d| d.message().to_string())
    })?;
    Ok(json!({ "type": kind, "id": id, "op": op, "project_id": project, "org_id": org }))
}
