//! How a record becomes one line: readable text (the default) or one JSON object
//! (`CONSOLED_LOG_FORMAT=json`), for log pipelines that index fields rather than parse messages.
//!
//! A record's structured fields (the `log` crate's key-values: `user_id`, `client`, `status`...)
//! are written after the message in the text form (`key=value`, quoted when needed) and as
//! members of the object in the JSON form: numbers and booleans stay numbers and booleans.

use std::fmt::Write;

use log::kv::{Error, Key, Value, VisitSource};
use log::Record;

/// The two line formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

impl Format {
    /// The format `CONSOLED_LOG_FORMAT` names (unset or empty: text).
    pub fn parse(value: Option<&str>) -> Result<Format, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Format::Text),
            Some(v) if v.eq_ignore_ascii_case("text") => Ok(Format::Text),
            Some(v) if v.eq_ignore_ascii_case("json") => Ok(Format::Json),
            Some(v) => Err(format!(
                "CONSOLED_LOG_FORMAT: {v:?} is not a log format; expected text or json"
            )),
        }
    }

    /// The line for `record` at time `ts` (RFC 3339), without the final newline.
    pub fn line(self, ts: &str, record: &Record) -> String {
        match self {
            Format::Text => text(ts, record),
            Format::Json => json(ts, record),
        }
    }
}

/// `[ts LEVEL target] message key=value ...`, as env_logger's own format plus the fields.
fn text(ts: &str, record: &Record) -> String {
    let mut out = format!(
        "[{ts} {:<5} {}] {}",
        record.level(),
        record.target(),
        record.args()
    );
    let mut fields = TextFields(&mut out);
    let _ = record.key_values().visit(&mut fields);
    out
}

struct TextFields<'a>(&'a mut String);

impl<'kvs> VisitSource<'kvs> for TextFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), Error> {
        let value = value.to_string();
        let plain = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
        if plain {
            let _ = write!(self.0, " {key}={value}");
        } else {
            let _ = write!(self.0, " {key}={}", quoted(&value));
        }
        Ok(())
    }
}

/// `{"ts":..,"level":..,"target":..,"msg":..,<fields>}`: one object, one line.
fn json(ts: &str, record: &Record) -> String {
    let mut out = format!(
        "{{\"ts\":{},\"level\":{},\"target\":{},\"msg\":{}",
        quoted(ts),
        quoted(record.level().as_str()),
        quoted(record.target()),
        quoted(&record.args().to_string())
    );
    let mut fields = JsonFields(&mut out);
    let _ = record.key_values().visit(&mut fields);
    out.push('}');
    out
}

struct JsonFields<'a>(&'a mut String);

impl<'kvs> VisitSource<'kvs> for JsonFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), Error> {
        let rendered = if let Some(n) = value.to_u64() {
            n.to_string()
        } else if let Some(n) = value.to_i64() {
            n.to_string()
        } else if let Some(b) = value.to_bool() {
            b.to_string()
        } else if let Some(f) = value.to_f64().filter(|f| f.is_finite()) {
            f.to_string()
        } else {
            quoted(&value.to_string())
        };
        let _ = write!(self.0, ",{}:{rendered}", quoted(key.as_str()));
        Ok(())
    }
}

/// A JSON string literal (also the text form's quoting: the same escapes read back anywhere).
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Level;

    fn with_record(f: impl FnOnce(&Record)) {
        let fields: [(&str, Value); 4] = [
            ("user_id", Value::from(42i64)),
            ("client", Value::from("192.0.2.7")),
            ("ok", Value::from(false)),
            ("cause", Value::from("connection refused \"x\"")),
        ];
        let args = format_args!("sign-in failed");
        let record = Record::builder()
            .args(args)
            .level(Level::Warn)
            .target("consoled::security")
            .key_values(&fields)
            .build();
        f(&record);
    }

    #[test]
    fn text_is_readable_with_fields_after_the_message() {
        with_record(|r| {
            assert_eq!(
                Format::Text.line("2026-01-01T00:00:00Z", r),
                "[2026-01-01T00:00:00Z WARN  consoled::security] sign-in failed user_id=42 \
                 client=192.0.2.7 ok=false cause=\"connection refused \\\"x\\\"\""
            );
        });
    }

    #[test]
    fn json_is_one_object_with_typed_fields() {
        with_record(|r| {
            let line = Format::Json.line("2026-01-01T00:00:00.123Z", r);
            assert!(!line.contains('\n'));
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["ts"], "2026-01-01T00:00:00.123Z");
            assert_eq!(v["level"], "WARN");
            assert_eq!(v["target"], "consoled::security");
            assert_eq!(v["msg"], "sign-in failed");
            assert_eq!(v["user_id"], 42);
            assert_eq!(v["client"], "192.0.2.7");
            assert_eq!(v["ok"], false);
            assert_eq!(v["cause"], "connection refused \"x\"");
        });
    }

    #[test]
    fn a_message_with_a_newline_stays_one_json_line() {
        let args = format_args!("two\nlines");
        let record = Record::builder()
            .args(args)
            .level(Level::Info)
            .target("consoled")
            .build();
        let line = Format::Json.line("t", &record);
        assert_eq!(line.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["msg"], "two\nlines");
    }

    #[test]
    fn the_format_is_named_or_refused() {
        assert_eq!(Format::parse(None), Ok(Format::Text));
        assert_eq!(Format::parse(Some("")), Ok(Format::Text));
        assert_eq!(Format::parse(Some("JSON")), Ok(Format::Json));
        let e = Format::parse(Some("xml")).unwrap_err();
        assert!(e.contains("CONSOLED_LOG_FORMAT") && e.contains("\"xml\"") && e.contains("json"));
    }
}
