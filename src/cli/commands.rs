//! What the command line offers: every command with its options and help text, and the values
//! `emit` accepts. One table, so that parsing, validation and `--help` cannot disagree.

/// One command: its words, its options (`--name VALUE`), and what it does.
pub struct Command {
    pub words: &'static [&'static str],
    pub synopsis: &'static str,
    pub about: &'static str,
    /// (name without `--`, required, help).
    pub options: &'static [(&'static str, bool, &'static str)],
}

/// The change types of `consoled_notify_change` (the interface's list; a test checks that the
/// migration accepts exactly these).
pub const CHANGE_TYPES: &[&str] = &[
    "server",
    "volume",
    "floating_ip",
    "elastic_ip",
    "primary_ip",
    "network",
    "nat_gateway",
    "firewall",
    "load_balancer",
    "image",
    "placement_group",
    "ssh_key",
    "action",
    "stack",
    "api_token",
    "project",
    "ticket",
    "wallet",
    "organization",
    "membership",
    "incident",
    "user",
];

pub const CHANGE_OPS: &[&str] = &["insert", "update", "delete"];

pub const COMMANDS: &[Command] = &[
    Command {
        words: &["serve"],
        synopsis: "consoled [serve]",
        about: "Applies pending migrations, then serves HTTP on CONSOLED_LISTEN until SIGTERM or \
                SIGINT (then it finishes the requests in hand, ends the event streams and exits \
                0). The default command. Settings: the CONSOLED_* variables (README, \
                \"Configuration\").",
        options: &[],
    },
    Command {
        words: &["migrate"],
        synopsis: "consoled migrate",
        about: "Applies pending migrations (numbered SQL files compiled into the binary) under a \
                PostgreSQL advisory lock and prints {\"applied\": [versions]}.",
        options: &[],
    },
    Command {
        words: &["project", "create"],
        synopsis: "consoled project create --org ID --name NAME",
        about: "Creates a project in an organization and prints {\"id\", \"org_id\", \"name\"}.",
        options: &[
            (
                "org",
                true,
                "the organization's id (GET /auth/session lists a user's organizations)",
            ),
            (
                "name",
                true,
                "1 to 100 characters, unique within the organization",
            ),
        ],
    },
    Command {
        words: &["token", "create"],
        synopsis: "consoled token create --project ID [--name NAME] [--scope SCOPE] \
                   [--expires-in SECONDS]",
        about: "Issues an API token for a project and prints {\"id\", \"project_id\", \"token\"}. \
                The token is shown only now (only its hash is stored); send it as \
                `Authorization: Bearer TOKEN` to GET /v1/events, or to the console's services \
                (GET /auth/check). Without --expires-in it never expires (the API's limit, \
                CONSOLED_TOKEN_MAX_LIFETIME_SECONDS, is for users, not for the operator).",
        options: &[
            ("project", true, "the project's id"),
            ("name", false, "a label for the token"),
            (
                "scope",
                false,
                "read or read_write (the default), as GET /auth/check reports it",
            ),
            (
                "expires-in",
                false,
                "seconds until it expires (default: never)",
            ),
        ],
    },
    Command {
        words: &["token", "list"],
        synopsis: "consoled token list --project ID",
        about: "Lists a project's API tokens, oldest first, and prints {\"project_id\", \
                \"tokens\": [{\"id\", \"name\", \"scope\", \"created_at\", \"created_by\", \
                \"last_used_at\", \"expires_at\", \"revoked_at\"}]} (times in UTC, RFC 3339; last \
                use to the minute, null if never used; created_by {\"id\", \"email\"} of the \
                user who made it, null for the command line's; expires_at null for never; \
                revoked_at null while not revoked). Never a secret: only hashes are stored, and \
                those are not shown either. The id is what token revoke takes.",
        options: &[("project", true, "the project's id")],
    },
    Command {
        words: &["token", "revoke"],
        synopsis: "consoled token revoke --id ID",
        about: "Revokes an API token and prints {\"id\", \"revoked\": true}; the token's open \
                event streams end at once.",
        options: &[(
            "id",
            true,
            "the token's id (the \"id\" printed by token create and token list)",
        )],
    },
    Command {
        words: &["keys", "generate"],
        synopsis: "consoled keys generate",
        about: "Prints {\"key\", \"key_id\"}: 32 new random bytes in base64, for \
                CONSOLED_DATA_KEY or CONSOLED_CSRF_KEY, and the id sealed secrets will name it \
                by. Needs no database.",
        options: &[],
    },
    Command {
        words: &["keys", "rotate"],
        synopsis: "consoled keys rotate",
        about: "Seals every stored TOTP secret under CONSOLED_DATA_KEY, opening each with that \
                key or one of CONSOLED_DATA_KEY_OLD, and prints {\"key_id\", \"resealed\", \
                \"already_current\"}. Run it once every instance has the new key; then the old \
                keys may be dropped. Fails, naming the users, when a secret opens with none of \
                the keys.",
        options: &[],
    },
    Command {
        words: &["mfa", "reset"],
        synopsis: "consoled mfa reset --email ADDRESS",
        about: "Removes a user's second factor (TOTP secret and recovery codes), ends every \
                session of the user and mails the owner, for a user who lost the authenticator \
                and the recovery codes, or whose secret a lost data key sealed. Prints \
                {\"user_id\", \"mfa_enabled\": false, \"sessions_ended\"}.",
        options: &[("email", true, "the account's email address")],
    },
    // The operator's user commands (issue 32; `cli::users`).
    Command {
        words: &["user", "find"],
        synopsis: "consoled user find (--email TEXT | --id N)",
        about: "Finds users by id, or by the part of their address given (any case), and prints \
                {\"users\": [{\"id\", \"email\", \"name\", \"locale\", \"email_verified\", \
                \"mfa_enabled\", \"has_password\", \"created\", \"disabled_at\"}]}, by id, at \
                most 100. Never a secret or hash.",
        options: &[
            (
                "email",
                false,
                "a part of the address (`@example.com` finds a domain's users)",
            ),
            ("id", false, "the user's id"),
        ],
    },
    Command {
        words: &["user", "show"],
        synopsis: "consoled user show (--id N | --email ADDRESS)",
        about: "Prints everything consoled holds about one user, as the user's own export (GET \
                /auth/account/export): the account, memberships, personal projects, sessions, \
                devices, linked identities, recovery codes and mailed links (when made and used, \
                never their values), queued mails, API tokens the user made, invitations made \
                and received, open streams and rate-limit events.",
        options: USER,
    },
    Command {
        words: &["user", "disable"],
        synopsis: "consoled user disable (--id N | --email ADDRESS)",
        about: "Disables an account and prints {\"user_id\", \"disabled\": true, \"changed\", \
                \"sessions_ended\"}. At once every session of the user ends (its event streams \
                close within a second), the API tokens the user made are refused and their \
                streams close, and no route signs the user in (403 account_disabled) until user \
                enable. changed is false when it was disabled already.",
        options: USER,
    },
    Command {
        words: &["user", "enable"],
        synopsis: "consoled user enable (--id N | --email ADDRESS)",
        about: "Enables a disabled account and prints {\"user_id\", \"disabled\": false, \
                \"changed\", \"sessions_ended\": 0}: the user may sign in again and the API \
                tokens the user made work again.",
        options: USER,
    },
    Command {
        words: &["user", "signout"],
        synopsis: "consoled user signout (--id N | --email ADDRESS)",
        about: "Signs a user out everywhere: every session ends, with its event streams, and \
                prints {\"user_id\", \"sessions_ended\"}. The user may sign in again.",
        options: USER,
    },
    Command {
        words: &["user", "delete"],
        synopsis: "consoled user delete (--id N | --email ADDRESS)",
        about: "Deletes a user and prints {\"user_id\", \"deleted\": true}: what goes and what \
                stays is the same as when the user deletes the account (docs/API.md, DELETE \
                /auth/account), and the address gets a mail saying so. Fails, naming them, while \
                the user is the last owner of a team organization.",
        options: USER,
    },
    Command {
        words: &["org", "suspend"],
        synopsis: "consoled org suspend --id ID",
        about: "Suspends an organization and prints {\"id\", \"status\": \"suspended\", \
                \"changed\"}. Its members can still read it and leave it, nothing in it can be \
                changed, its changes reach no event stream and its projects' API tokens are \
                refused (their open streams end at once, on every instance).",
        options: &[("id", true, "the organization's id")],
    },
    Command {
        words: &["org", "resume"],
        synopsis: "consoled org resume --id ID",
        about: "Makes a suspended organization active again and prints {\"id\", \"status\": \
                \"active\", \"changed\"}. A closed organization stays closed.",
        options: &[("id", true, "the organization's id")],
    },
    Command {
        words: &["invitation", "create"],
        synopsis: "consoled invitation create --email ADDRESS [--org ID [--role ROLE]]",
        about: "Invites an address and prints the invitation {\"id\", \"org_id\", \"email\", \
                \"role\", \"invited_by\", \"created\", \"expires\"}; the mail with its link \
                (valid 7 days, used once) is queued as an owner's invitation would be. Without \
                --org it invites to make an account, for CONSOLED_SIGNUP=invite.",
        options: &[
            ("email", true, "the address to invite"),
            ("org", false, "the team organization to join"),
            (
                "role",
                false,
                "owner, admin, member (the default) or viewer; needs --org",
            ),
        ],
    },
    Command {
        words: &["emit"],
        synopsis: "consoled emit --type TYPE --id N --op OP [--project P] [--org O]",
        about: "Announces a resource change through consoled_notify_change, as the console's \
                other services do, and prints it. Every event stream that may see it gets a \
                `change` event at once: token streams of project P, session streams of the \
                members of P's organization or of O.",
        options: &[
            (
                "type",
                true,
                "server, volume, floating_ip, elastic_ip, primary_ip, network, nat_gateway, \
                 firewall, load_balancer, image, placement_group, ssh_key, action, stack, \
                 api_token, project, ticket, wallet, organization, membership, incident or user",
            ),
            ("id", true, "the changed resource's id (a number)"),
            ("op", true, "insert, update or delete"),
            ("project", false, "the resource's project id"),
            ("org", false, "the resource's organization id"),
        ],
    },
];

/// The options of the commands that act on one user.
const USER: &[(&str, bool, &str)] = &[
    ("id", false, "the user's id (as user find prints it)"),
    ("email", false, "the account's email address"),
];

/// The overview of `consoled --help`.
pub fn overview() -> String {
    let mut out = String::from(
        "consoled: account sessions and a change stream for a cloud console.\n\nusage:\n",
    );
    for c in COMMANDS {
        let first = c
            .about
            .split(". ")
            .next()
            .unwrap_or(c.about)
            .trim_end_matches('.');
        out.push_str(&format!("  {}\n      {}.\n", c.synopsis, wrap(first, 6)));
    }
    out.push_str(
        "  consoled help [COMMAND]    (or COMMAND --help) what a command does and its options\n\
         \x20 consoled --version         the version\n\n\
         Every command reads DATABASE_URL (a PostgreSQL URL; `make run` starts a database and \
         prints it).\nOnly serve and migrate apply pending migrations; the other commands \
         refuse an out-of-date schema\n(run `consoled migrate`). Commands other than serve \
         print one JSON object on stdout; on failure\nevery command prints `consoled: REASON` \
         on stderr and exits 1, or 78 for a configuration error\n(a setting refused, \
         DATABASE_URL not a PostgreSQL URL, the database refusing the user or\npassword, no \
         such database). RUST_LOG sets the log filter (default: info; logs go to stderr).\n",
    );
    out
}

/// The help of one command.
pub fn help(c: &Command) -> String {
    let mut out = format!("usage: {}\n\n{}\n", c.synopsis, wrap(c.about, 0));
    if !c.options.is_empty() {
        out.push_str("\noptions:\n");
        for (name, required, help) in c.options {
            let need = if *required { "required" } else { "optional" };
            out.push_str(&format!(
                "  --{name:<9} {need}: {}\n",
                wrap(help, 24).trim_start()
            ));
        }
    }
    out.push_str("\nDATABASE_URL names the database; see `consoled --help`.\n");
    out
}

/// Wraps text at 96 columns, indenting continuation lines by `indent`.
fn wrap(text: &str, indent: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > 96 {
            out.push_str(&line);
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out
}

pub fn find(words: &[&str]) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.words == words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_are_those_the_database_function_accepts() {
        let sql = include_str!("../../migrations/0001_init.sql");
        let start = sql.find("p_type NOT IN (").expect("the type check") + 15;
        let end = start + sql[start..].find(')').unwrap();
        let accepted: Vec<&str> = sql[start..end]
            .split(',')
            .map(|s| s.trim().trim_matches('\''))
            .collect();
        assert_eq!(accepted, CHANGE_TYPES);
        assert!(sql.contains("p_op NOT IN ('insert', 'update', 'delete')"));
    }

    #[test]
    fn the_emit_help_lists_every_type() {
        let emit = find(&["emit"]).unwrap();
        let text = help(emit);
        for t in CHANGE_TYPES.iter().chain(CHANGE_OPS) {
            assert!(text.contains(t), "{t}");
        }
    }
}
