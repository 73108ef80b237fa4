//! The words for a run that failed on a device in a mode its pattern does not work in
//! (`modes:`): what the mode is and the call that gets the device there (a loader download,
//! `flash_board`, `boot_board {to: "maskrom"}`), as `execute_command`'s answer and a job's
//! stored answer show it (`mode_hint`), like [`super::DeviceLeft`]'s words.

use gatecmd_domain::usecases::command::{Report, WrongMode};

/// The wrong-mode hint of a run that did not succeed (a run that worked needs none).
pub fn mode_hint(run: &Report) -> Option<String> {
    (!run.succeeded() && !run.dry_run)
        .then_some(run.wrong_mode.as_ref())
        .flatten()
        .map(hint)
}

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
    let step = if w.works_in.iter().any(|m| m == "maskrom") {
        match &w.board {
            Some(b) => {
                format!("put it in MaskROM first: boot_board {{board: \"{b}\", to: \"maskrom\"}}")
            }
            None => "put it in MaskROM first (its recovery button: the device is at no configured \
                     board's port, so boot_board cannot)"
                .to_string(),
        }
    } else if let Some(step) = w.loader_steps.first() {
        let args: Vec<String> = step.split(' ').map(|word| format!("\"{word}\"")).collect();
        let flash = match &w.board {
            Some(b) => format!(
                "; or flash_board {{board: \"{b}\", image: …}}, which sends the loader itself"
            ),
            None => String::new(),
        };
        format!(
            "download a loader first: execute_command {{command: \"{}\", args: [{}], device: \"{}\"}} \
             (a loader list_boards allows), then run this again{flash}",
            w.command,
            args.join(", "),
            w.device
        )
    } else {
        format!("bring the device to {} mode first", w.works_in.join(" or "))
    };
    format!("{head}: {step}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrong(mode: &str, works_in: &str, board: Option<&str>) -> WrongMode {
        WrongMode {
            command: "rkdeveloptool".into(),
            pattern: "db {loader}".into(),
            device: "1-2".into(),
            mode: mode.into(),
            works_in: vec![works_in.into()],
            board: board.map(Into::into),
            loader_steps: if mode == "maskrom" {
                vec!["db {loader}".into()]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn each_direction_names_the_call_that_gets_there() {
        let to_maskrom = hint(&wrong("loader", "maskrom", Some("rk1")));
        assert!(
            to_maskrom.contains("device 1-2 is in loader mode")
                && to_maskrom.contains("boot_board {board: \"rk1\", to: \"maskrom\"}"),
            "{to_maskrom}"
        );
        let no_board = hint(&wrong("loader", "maskrom", None));
        assert!(
            no_board.contains("recovery button") && !no_board.contains("boot_board {"),
            "{no_board}"
        );
        let to_loader = hint(&wrong("maskrom", "loader", Some("rk1")));
        assert!(
            to_loader.contains(
                "execute_command {command: \"rkdeveloptool\", args: [\"db\", \"{loader}\"], device: \"1-2\"}"
            ) && to_loader.contains("flash_board {board: \"rk1\""),
            "{to_loader}"
        );
        let other = hint(&WrongMode {
            loader_steps: vec![],
            ..wrong("fastboot", "dfu", None)
        });
        assert!(
            other.ends_with("bring the device to dfu mode first"),
            "{other}"
        );
    }
}
