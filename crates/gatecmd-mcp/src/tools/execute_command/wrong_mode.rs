//! `execute_command`'s words for a run that failed on a device in a mode its pattern does
//! not work in (`modes:`): what the mode is and the call that gets the device there.

use gatecmd_domain::usecases::command::WrongMode;

/// The hint, naming real calls: a loader download (a `loader_args` pattern of the same
/// command, or `flash_board`) from MaskROM, `boot_board {to: "maskrom"}` towards MaskROM.
pub fn hint(w: &WrongMode) -> String {
    let head = format!(
        "device {} is in {} mode, and `{} {}` works in {} mode",
        w.device,
        w.mode,
        w.command,
        w.pattern,
        w.works_in.join(" or ")
    );
    let board = w.board.as_deref().unwrap_or("BOARD");
    let step = if w.works_in.iter().any(|m| m == "maskrom") {
        format!(
            "put it in MaskROM first: boot_board {{board: \"{board}\", to: \"maskrom\"}}{}",
            if w.board.is_none() {
                " (the device is at no configured board's port: use its recovery button)"
            } else {
                ""
            }
        )
    } else if let Some(step) = w.loader_steps.first() {
        let args: Vec<String> = step.split(' ').map(|word| format!("\"{word}\"")).collect();
        format!(
            "download a loader first: execute_command {{command: \"{}\", args: [{}], device: \"{}\"}} \
             (a loader list_boards allows), then run this again; or flash_board {{board: \"{board}\", image: …}}, \
             which sends the loader itself",
            w.command,
            args.join(", "),
            w.device
        )
    } else {
        format!("bring the device to {} mode first", w.works_in.join(" or "))
    };
    format!("{head}: {step}")
}
