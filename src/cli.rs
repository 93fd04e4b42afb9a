//! Command line: `serve` (default), `migrate`, `project create`, `token create|revoke`, `emit`.
//! Every command reads DATABASE_URL and prints JSON on stdout.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::Config;
use crate::db::{self, orgs, tokens};

pub const USAGE: &str = "usage:
  consoled [serve]
  consoled migrate
  consoled project create --org ID --name NAME
  consoled token create --project ID [--name NAME]
  consoled token revoke --id ID
  consoled emit --type T --id N --op insert|update|delete [--project P] [--org O]";

/// A command other than `serve`; `Ok(json)` is printed by main.
pub fn run(config: &Config, args: &[String]) -> Result<Value, String> {
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .take_while(|a| !a.starts_with("--"))
        .collect();
    let flags = parse_flags(&args[words.len()..])?;
    match words.as_slice() {
        ["migrate"] => {
            let applied = crate::migrate(config, Duration::from_secs(30))?;
            Ok(json!({ "applied": applied }))
        }
        ["project", "create"] => project_create(config, &flags),
        ["token", "create"] => token_create(config, &flags),
        ["token", "revoke"] => token_revoke(config, &flags),
        ["emit"] => emit(config, &flags),
        _ => Err(USAGE.to_string()),
    }
}

fn parse_flags(args: &[String]) -> Result<HashMap<String, String>, String> {
    let mut flags = HashMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}\n{USAGE}"))?;
        let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
        flags.insert(name.to_string(), value.clone());
    }
    Ok(flags)
}

fn id_flag(flags: &HashMap<String, String>, name: &str) -> Result<i64, String> {
    flags
        .get(name)
        .ok_or_else(|| format!("--{name} is required\n{USAGE}"))?
        .parse()
        .map_err(|_| format!("--{name} must be a number"))
}

fn opt_id_flag(flags: &HashMap<String, String>, name: &str) -> Result<Option<i64>, String> {
    flags.get(name).map(|_| id_flag(flags, name)).transpose()
}

fn connect(config: &Config) -> Result<postgres::Client, String> {
    crate::migrate(config, Duration::from_secs(5))?;
    db::connect(config, "consoled-cli")
}

fn project_create(config: &Config, flags: &HashMap<String, String>) -> Result<Value, String> {
    let org_id = id_flag(flags, "org")?;
    let name = flags
        .get("name")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && s.chars().count() <= 100);
    let name = name.ok_or("--name is required (1 to 100 characters)")?;
    let mut c = connect(config)?;
    if !orgs::org_exists(&mut c, org_id).map_err(|e| e.to_string())? {
        return Err(format!("organization {org_id} does not exist"));
    }
    let project = orgs::create_project(&mut c, org_id, name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("organization {org_id} has a project named {name:?} already"))?;
    Ok(json!({ "id": project.id, "org_id": project.org_id, "name": project.name }))
}

fn token_create(config: &Config, flags: &HashMap<String, String>) -> Result<Value, String> {
    let project_id = id_flag(flags, "project")?;
    let name = flags.get("name").map(String::as_str).unwrap_or("");
    let mut c = connect(config)?;
    if orgs::find_project(&mut c, project_id)
        .map_err(|e| e.to_string())?
        .is_none()
    {
        return Err(format!("project {project_id} does not exist"));
    }
    let (id, token) = tokens::create(&mut c, project_id, name).map_err(|e| e.to_string())?;
    Ok(json!({ "id": id, "project_id": project_id, "token": token }))
}

fn token_revoke(config: &Config, flags: &HashMap<String, String>) -> Result<Value, String> {
    let id = id_flag(flags, "id")?;
    let mut c = connect(config)?;
    if !tokens::revoke(&mut c, id).map_err(|e| e.to_string())? {
        return Err(format!("no live token with id {id}"));
    }
    Ok(json!({ "id": id, "revoked": true }))
}

fn emit(config: &Config, flags: &HashMap<String, String>) -> Result<Value, String> {
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
