//! Security events (OWASP ASVS 5.0 16.3.1, 16.3.2): who did what, from where. One record per
//! event at target `consoled::security`: `info` for what succeeded, `warn` for what failed; the
//! fields are `event` (the name below), `client` (the address the limits count) and `user_id`
//! when the account is known, plus the event's own (never a secret: no password, code, token or
//! submitted email address).
//!
//! Refusals before any check (a blocked address, a full hash queue) are floods, not events: they
//! are counted and summarised (`flood`).

use std::net::IpAddr;

use log::kv::Value;
use log::Level;

/// The log target of security events.
pub const TARGET: &str = "consoled::security";

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Signup,
    SigninSucceeded,
    SigninFailed,
    SecondFactorSucceeded,
    SecondFactorFailed,
    ProviderSignin,
    ProviderSigninFailed,
    EmailVerified,
    PasswordResetRequested,
    PasswordReset,
    PasswordChanged,
    PasswordChangeRefused,
    ReauthFailed,
    Logout,
    SessionRevoked,
    MfaEnabled,
    MfaDisabled,
    RecoveryCodesReplaced,
    SignupRefused,
    OrganizationCreated,
    OrganizationSuspended,
    OrganizationResumed,
    MemberInvited,
    InvitationCancelled,
    InvitationAccepted,
    MemberRoleChanged,
    MemberRemoved,
    MemberLeft,
    ProjectDeleted,
    ApiTokenCreated,
    ApiTokenRevoked,
    // The account's life (issue 32): the user's own changes, and the operator's.
    SigninRefused,
    ProfileChanged,
    EmailChangeRequested,
    EmailChanged,
    AccountExported,
    AccountDeleted,
    AccountDisabled,
    AccountEnabled,
    SignedOutEverywhere,
}

impl Event {
    /// The `event` field: stable names for alerts and queries.
    pub fn name(self) -> &'static str {
        match self {
            Event::Signup => "signup",
            Event::SigninSucceeded => "signin_succeeded",
            Event::SigninFailed => "signin_failed",
            Event::SecondFactorSucceeded => "second_factor_succeeded",
            Event::SecondFactorFailed => "second_factor_failed",
            Event::ProviderSignin => "provider_signin",
            Event::ProviderSigninFailed => "provider_signin_failed",
            Event::EmailVerified => "email_verified",
            Event::PasswordResetRequested => "password_reset_requested",
            Event::PasswordReset => "password_reset",
            Event::PasswordChanged => "password_changed",
            Event::PasswordChangeRefused => "password_change_refused",
            Event::ReauthFailed => "reauth_failed",
            Event::Logout => "logout",
            Event::SessionRevoked => "session_revoked",
            Event::MfaEnabled => "mfa_enabled",
            Event::MfaDisabled => "mfa_disabled",
            Event::RecoveryCodesReplaced => "recovery_codes_replaced",
            Event::SignupRefused => "signup_refused",
            Event::OrganizationCreated => "organization_created",
            Event::OrganizationSuspended => "organization_suspended",
            Event::OrganizationResumed => "organization_resumed",
            Event::MemberInvited => "member_invited",
            Event::InvitationCancelled => "invitation_cancelled",
            Event::InvitationAccepted => "invitation_accepted",
            Event::MemberRoleChanged => "member_role_changed",
            Event::MemberRemoved => "member_removed",
            Event::MemberLeft => "member_left",
            Event::ProjectDeleted => "project_deleted",
            Event::ApiTokenCreated => "api_token_created",
            Event::ApiTokenRevoked => "api_token_revoked",
            Event::SigninRefused => "signin_refused",
            Event::ProfileChanged => "profile_changed",
            Event::EmailChangeRequested => "email_change_requested",
            Event::EmailChanged => "email_changed",
            Event::AccountExported => "account_exported",
            Event::AccountDeleted => "account_deleted",
            Event::AccountDisabled => "account_disabled",
            Event::AccountEnabled => "account_enabled",
            Event::SignedOutEverywhere => "signed_out_everywhere",
        }
    }

    /// The message of the record, for a reader of the text form.
    fn message(self) -> &'static str {
        match self {
            Event::Signup => "signup",
            Event::SigninSucceeded => "sign-in succeeded",
            Event::SigninFailed => "sign-in failed",
            Event::SecondFactorSucceeded => "second factor accepted",
            Event::SecondFactorFailed => "second factor refused",
            Event::ProviderSignin => "provider sign-in",
            Event::ProviderSigninFailed => "provider sign-in failed",
            Event::EmailVerified => "email verified",
            Event::PasswordResetRequested => "password reset requested",
            Event::PasswordReset => "password reset",
            Event::PasswordChanged => "password changed",
            Event::PasswordChangeRefused => "password change refused (wrong current password)",
            Event::ReauthFailed => "password confirmation failed",
            Event::Logout => "logout",
            Event::SessionRevoked => "session revoked",
            Event::MfaEnabled => "second factor enabled",
            Event::MfaDisabled => "second factor disabled",
            Event::RecoveryCodesReplaced => "recovery codes replaced",
            Event::SignupRefused => "sign-up refused by the sign-up policy",
            Event::OrganizationCreated => "organization created",
            Event::OrganizationSuspended => "organization suspended",
            Event::OrganizationResumed => "organization resumed",
            Event::MemberInvited => "member invited",
            Event::InvitationCancelled => "invitation cancelled",
            Event::InvitationAccepted => "invitation accepted",
            Event::MemberRoleChanged => "member's role changed",
            Event::MemberRemoved => "member removed",
            Event::MemberLeft => "member left the organization",
            Event::ProjectDeleted => "project deleted",
            Event::ApiTokenCreated => "API token made",
            Event::ApiTokenRevoked => "API token revoked",
            Event::SigninRefused => "sign-in refused (account disabled)",
            Event::ProfileChanged => "profile changed",
            Event::EmailChangeRequested => "email change requested",
            Event::EmailChanged => "email address changed",
            Event::AccountExported => "account data exported",
            Event::AccountDeleted => "account deleted",
            Event::AccountDisabled => "account disabled",
            Event::AccountEnabled => "account enabled",
            Event::SignedOutEverywhere => "signed out everywhere",
        }
    }

    /// Failures are `warn`, the rest `info`.
    pub fn level(self) -> Level {
        match self {
            Event::SigninFailed
            | Event::SecondFactorFailed
            | Event::ProviderSigninFailed
            | Event::PasswordChangeRefused
            | Event::ReauthFailed
            | Event::SignupRefused
            | Event::SigninRefused => Level::Warn,
            _ => Level::Info,
        }
    }
}

/// Logs `event` by `client` on `user_id`'s account, with the event's own `fields` (never a
/// secret). Handlers call it through `auth::audit`, which finds the client of a request.
pub fn event(event: Event, client: Option<IpAddr>, user_id: Option<i64>, fields: &[(&str, Value)]) {
    let client = client.map(|ip| ip.to_string());
    let mut all: Vec<(&str, Value)> = Vec::with_capacity(fields.len() + 3);
    all.push(("event", Value::from(event.name())));
    all.push((
        "client",
        Value::from(client.as_deref().unwrap_or("unknown")),
    ));
    if let Some(id) = user_id {
        all.push(("user_id", Value::from(id)));
    }
    all.extend(fields.iter().map(|(k, v)| (*k, v.clone())));
    super::emit(event.level(), TARGET, event.message(), &all);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_warnings_and_names_are_distinct() {
        let all = [
            Event::Signup,
            Event::SigninSucceeded,
            Event::SigninFailed,
            Event::SecondFactorSucceeded,
            Event::SecondFactorFailed,
            Event::ProviderSignin,
            Event::ProviderSigninFailed,
            Event::EmailVerified,
            Event::PasswordResetRequested,
            Event::PasswordReset,
            Event::PasswordChanged,
            Event::PasswordChangeRefused,
            Event::ReauthFailed,
            Event::Logout,
            Event::SessionRevoked,
            Event::MfaEnabled,
            Event::MfaDisabled,
            Event::RecoveryCodesReplaced,
            Event::SignupRefused,
            Event::OrganizationCreated,
            Event::OrganizationSuspended,
            Event::OrganizationResumed,
            Event::MemberInvited,
            Event::InvitationCancelled,
            Event::InvitationAccepted,
            Event::MemberRoleChanged,
            Event::MemberRemoved,
            Event::MemberLeft,
            Event::ProjectDeleted,
            Event::ApiTokenCreated,
            Event::ApiTokenRevoked,
            Event::SigninRefused,
            Event::ProfileChanged,
            Event::EmailChangeRequested,
            Event::EmailChanged,
            Event::AccountExported,
            Event::AccountDeleted,
            Event::AccountDisabled,
            Event::AccountEnabled,
            Event::SignedOutEverywhere,
        ];
        let mut names: Vec<&str> = all.iter().map(|e| e.name()).collect();
        // docs/LOGS.md's table names every event an operator may find.
        let logs = include_str!("../../docs/LOGS.md");
        for name in &names {
            assert!(
                logs.contains(&format!("`{name}`")),
                "{name} missing from docs/LOGS.md"
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(Event::SigninFailed.level(), Level::Warn);
        assert_eq!(Event::SigninSucceeded.level(), Level::Info);
    }
}
