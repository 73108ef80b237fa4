// A module of gatecmd-core reaching up into the domain: refused.
use gatecmd_core::refusal::RefusalReason;
use gatecmd_domain::state::AppState;

fn main() {
    let _ = (RefusalReason::ALL, std::mem::size_of::<AppState>());
}
