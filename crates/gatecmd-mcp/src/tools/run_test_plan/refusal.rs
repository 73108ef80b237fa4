//! Why `run_test_plan` said no before its job started: the use case's refusals
//! (`usecases::plan::Refused`) worded for the agent, each classified once.

use gatecmd_core::refusal::common::UnknownBoard;
use gatecmd_core::refusal::{Classified, Refusal, RefusalReason};
use gatecmd_core::sanitizer::FileArgError;
use gatecmd_domain::usecases::plan::{Ask, PlanError, Refused};

use crate::calls::reasons::file_reason;
use crate::console::board_talk::TalkRefusal;

/// Why `run_test_plan` said no before anything ran.
#[derive(Debug, thiserror::Error)]
pub enum PlanRefusal {
    #[error(
        "give the plan as plan (an object, or YAML/JSON text) or as plan_file (a file in the \
         file roots), exactly one of them; e.g. run_test_plan {{\"board\": \"{board}\", \"plan\": \
         {{\"name\": \"smoke\", \"steps\": [{{\"name\": \"kernel\", \"run\": \"uname -r\"}}]}}}} \
         (docs/TESTPLANS.md)"
    )]
    NoPlan { board: String },
    #[error("{error}; nothing ran (docs/TESTPLANS.md has the plan format)")]
    Plan { error: PlanError },
    #[error("the plan_file {value:?} cannot be used: {error}; list_files shows the file roots")]
    File { value: String, error: FileArgError },
    #[error("the plan_file {value:?} could not be read as UTF-8 text: {why}")]
    Unreadable { value: String, why: String },
    #[error("timeout_secs must be 1 to {max}; {given} was given")]
    TimeoutOutOfRange { given: u64, max: u64 },
    #[error(
        "client {client:?} already runs {max} commands at once (limits.max_concurrent_per_client; \
         a plan counts as one); wait for one to finish (list_jobs), then retry"
    )]
    TooManyRunning { client: String, max: usize },
    #[error(transparent)]
    Talk(#[from] TalkRefusal),
}

impl Classified for PlanRefusal {
    fn reason(&self) -> RefusalReason {
        use RefusalReason as R;
        match self {
            PlanRefusal::NoPlan { .. } | PlanRefusal::Plan { .. } => R::InvalidRequest,
            PlanRefusal::File { error, .. } => file_reason(error),
            PlanRefusal::Unreadable { .. } => R::WrongFileType,
            PlanRefusal::TimeoutOutOfRange { .. } => R::TimeoutTooLong,
            PlanRefusal::TooManyRunning { .. } => R::Limit,
            PlanRefusal::Talk(e) => e.reason(),
        }
    }
}

/// Words a refusal of the use case for `ask`.
pub(super) fn worded(r: Refused, ask: &Ask) -> Refusal {
    use PlanRefusal as P;
    let (client, board) = (ask.client.clone(), ask.board.clone());
    match r {
        Refused::Plan(error) => P::Plan { error },
        Refused::File { value, error } => P::File { value, error },
        Refused::Unreadable { value, why } => P::Unreadable { value, why },
        Refused::TimeoutOutOfRange { given, max } => P::TimeoutOutOfRange { given, max },
        Refused::TooManyRunning { max } => P::TooManyRunning { client, max },
        Refused::UnknownBoard { known } => P::Talk(UnknownBoard { name: board, known }.into()),
        Refused::Lease(e) => P::Talk(e.into()),
        Refused::Lock(e) => P::Talk(e.into()),
        Refused::NoConsole => P::Talk(TalkRefusal::NoConsole { board }),
        Refused::BadPrompts(why) => P::Talk(TalkRefusal::BadPrompts { board, why }),
        Refused::Approval(r) => return r,
    }
    .into()
}
