//! Who `board_run` logs in as at a login prompt: the operator's `console.login` when the
//! board has one (it always wins), else the caller's `login: {user, password?}`, else
//! nobody (refused `login_needed`, naming both ways in). The caller's password is typed
//! only when the board asks one and is never logged or audited.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::refusal::TalkRefusal;
use gatecmd_domain::config::BoardConfig;
use gatecmd_domain::console::session::LoginAs;

/// The user (and password) `board_run` types at a login prompt; never logged or audited.
/// Serialised only to carry a call on a lab peer's board to that host (the peer link,
/// authenticated with the peer's token: docs/LAB.md).
#[derive(Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallerLogin {
    /// The user name, e.g. "root" (printable, at most 64 characters).
    pub user: String,
    /// The password, when the board asks one (printable, at most 256 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl std::fmt::Debug for CallerLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallerLogin")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// Longest user name and password a caller may give.
const MAX_USER_CHARS: usize = 64;
const MAX_PASSWORD_CHARS: usize = 256;

impl CallerLogin {
    /// Why the caller's login cannot be typed as given (a line end would type more).
    pub fn problem(&self) -> Option<TalkRefusal> {
        let bad =
            |what: &'static str, v: &str, max: usize| {
                let control = v.chars().any(char::is_control);
                (v.is_empty() || control || v.chars().count() > max)
                    .then_some(TalkRefusal::BadLogin { what, max, control })
            };
        bad("login.user", &self.user, MAX_USER_CHARS).or_else(|| {
            self.password
                .as_deref()
                .and_then(|p| bad("login.password", p, MAX_PASSWORD_CHARS))
        })
    }
}

/// Who logs in at a login prompt: the operator's `console.login` when set (it wins), else
/// the caller's `login`, else nobody (the call is refused `login_needed`).
pub fn login_as<'a>(
    board: &'a BoardConfig,
    caller: Option<&'a CallerLogin>,
) -> Option<LoginAs<'a>> {
    match (board.shell.login.as_ref(), caller) {
        (Some(configured), _) => Some(LoginAs::Configured(configured)),
        (None, Some(c)) => Some(LoginAs::Caller {
            user: &c.user,
            password: c.password.as_deref(),
        }),
        (None, None) => None,
    }
}
