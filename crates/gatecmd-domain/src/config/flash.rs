//! The `flash:` section: who may use `flash_board` on which boards, which loaders it may
//! send, where its resume journals live and how large its USB writes are
//! (docs/FLASHING.md). Off unless `enabled: true`: writing a board's flash is the most
//! destructive thing gatecmd does, so an operator turns it on knowingly.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::declare::settings;

settings! {
    /// `flash:` as written and as used (every key applies on reload: `flash_board` reads
    /// the configuration in force at each call).
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct FlashSettings {
        enabled: bool {
            default: false,
            docs: "offer `flash_board`; `false`: every call is refused (`not_configured`) \
                naming this key. Off by default: it rewrites a board's flash.",
        },
        boards: Option<Vec<String>> {
            default: None,
            shown: "all boards",
            docs: "names of the boards `flash_board` may write; each must be a configured \
                board. The caller needs the board's lease in any case.",
        },
        clients: Option<Vec<String>> {
            default: None,
            shown: "all clients",
            docs: "names of the clients that may call `flash_board`; each must be a \
                configured client (`default` when only the generated token exists).",
        },
        loaders: Option<Vec<PathBuf>> {
            default: None,
            shown: "any file in `file_roots`",
            docs: "absolute paths of the loader files (or of directories holding them) \
                `flash_board` may send to a board in MaskROM; a loader is opened beneath \
                `file_roots` like any file argument and must then resolve to one of these. \
                The same holds for `execute_command`'s loader arguments (a pattern's \
                `loader_args`, e.g. rkdeveloptool's `db` and `ul`); `list_boards` shows \
                the allowed files per board (`flash.loaders`).",
        },
        loaders_writable: bool {
            default: false,
            docs: "accept `loaders` that lie in a file root some client may write \
                (`write_roots`, or every root for the generated token's client). Off by \
                default, and then such a configuration is refused at load, naming the root \
                and its writers: a client that may write there could replace a loader that \
                `flash_board` then sends to another client's board (docs/SECURITY.md). Turn \
                it on only where every writer of that root is trusted with every board.",
        },
        state_dir: Option<PathBuf> {
            default: None,
            shown: "`<state_dir>/flash`",
            check: absolute_if_set,
            docs: "where the resume journals live (one owner-only file per board, created \
                0700 if missing).",
        },
        transfer_kib: u32 {
            default: 4096,
            check: transfer_in_range,
            docs: "the largest USB read or write command tried, in KiB (16 … 4096). A \
                loader that stalls or fails a transfer above 64 KiB (what rkdeveloptool \
                and the rockusb crate send, which every Rockchip loader takes) is brought \
                back once within the flash (`power.maskrom`, the loader sent again: step \
                `recover`) and the flash goes on at 64 KiB; a loader this server sent is \
                remembered for that board by its SHA-256, so its next flash there starts at 64 KiB. Without \
                `power.maskrom` or a loader in the call, such a flash fails instead: set \
                64 for those boards' loaders.",
        },
        max_image_gib: u64 {
            default: 256,
            check: max_image_in_range,
            docs: "the most image, in GiB, `check_image` expands before the board's flash \
                size is known (a compressed image is decompressed to learn its size; a sparse \
                header declares one): past it `check_image` fails, naming this key, as \
                soon as the image's header declares more or its decoder has produced more, \
                before the board is touched (1 … 16384). 256 is the largest eMMC sold; after `flash_info` \
                the board's own flash is the bound.",
        },
        device_wait_secs: u64 {
            default: 20,
            check: wait_in_range,
            docs: "how long the rockusb device is awaited at the board's port after the \
                MaskROM action, and the Loader after the loader was sent (1 … 300).",
        },
    }
}

/// Whether a loader that resolved to `real` is one of `allowed` (a file, or beneath a
/// directory, component-wise); `None` allows any.
pub fn loader_in(allowed: Option<&[PathBuf]>, real: &Path) -> bool {
    allowed.is_none_or(|l| l.iter().any(|a| real.starts_with(a)))
}

#[allow(clippy::ref_option)] // a check takes its key's declared type
fn absolute_if_set(p: &Option<PathBuf>) -> Option<String> {
    p.as_ref()
        .filter(|p| !p.is_absolute())
        .map(|p| format!("{} is not an absolute path", p.display()))
}

fn transfer_in_range(v: &u32) -> Option<String> {
    (!(16..=4096).contains(v)).then(|| "must be between 16 and 4096 (KiB); default 4096".into())
}

fn max_image_in_range(v: &u64) -> Option<String> {
    (!(1..=16384).contains(v)).then(|| "must be between 1 and 16384 (GiB); default 256".into())
}

fn wait_in_range(v: &u64) -> Option<String> {
    (!(1..=300).contains(v)).then(|| "must be between 1 and 300 (seconds); default 20".into())
}

impl FlashSettings {
    /// Whether `board` may be flashed.
    pub fn allows_board(&self, board: &str) -> bool {
        self.boards
            .as_ref()
            .is_none_or(|b| b.iter().any(|n| n == board))
    }

    /// Whether client `name` may flash (an agent acting through a lab peer, `HOST/CLIENT`,
    /// as the peer client `HOST`).
    pub fn allows_client(&self, name: &str) -> bool {
        let name = super::peers::configured_client(name);
        self.clients
            .as_ref()
            .is_none_or(|c| c.iter().any(|n| n == name))
    }

    /// Whether a loader that resolved to `real` may be sent: it is one of `loaders`, or
    /// lies beneath one of them (component-wise, on the resolved path of the open file).
    pub fn allows_loader(&self, real: &Path) -> bool {
        loader_in(self.loaders.as_deref(), real)
    }

    /// Where the resume journals live.
    pub fn journal_dir(&self, state_dir: &Path) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| state_dir.join("flash"))
    }

    /// The most image `check_image` expands, in bytes.
    pub fn max_image_bytes(&self) -> u64 {
        self.max_image_gib << 30
    }

    /// Blocks of 512 bytes per USB write command.
    pub fn transfer_blocks(&self) -> u32 {
        self.transfer_kib * 2
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    const BOARD: &str = "boards:\n  - name: vb1\n    usb: \"1-1\"\n";

    #[test]
    fn off_by_default_and_every_key_applies() {
        let c = Config::parse(BOARD, "t.yaml").expect("valid");
        assert!(!c.flash.enabled);
        assert!(c.flash.allows_board("vb1") && c.flash.allows_client("anyone"));
        let text = format!(
            "{BOARD}flash:\n  enabled: true\n  boards: [vb1]\n  loaders: [/srv/loaders]\n  transfer_kib: 4096\n"
        );
        let c = Config::parse(&text, "t.yaml").expect("valid");
        assert!(c.flash.enabled && c.flash.allows_board("vb1") && !c.flash.allows_board("vb2"));
        assert!(
            c.flash
                .allows_loader(std::path::Path::new("/srv/loaders/rk3588.bin"))
        );
        assert!(
            !c.flash
                .allows_loader(std::path::Path::new("/srv/loadersx/a.bin"))
        );
        assert_eq!(c.flash.transfer_blocks(), 8192);
        assert_eq!(c.flash.max_image_bytes(), 256 << 30);
    }

    /// Issue 46 (lead): loaders in a root a client may write are refused at load, naming
    /// the root and its writers, unless `loaders_writable` accepts them.
    #[test]
    fn loaders_a_client_may_write_are_refused() {
        let text = |writable: &str, extra: &str| {
            format!(
                "clients:\n  - name: vm-a\n    token: aaaaaaaaaaaaaaaaaaaaaaaa\n    write_roots: [/srv/images]\n\
                 \x20 - name: ops\n    token: bbbbbbbbbbbbbbbbbbbbbbbb\n\
                 file_roots: [/srv/images, /srv/loaders]\n{BOARD}\
                 flash:\n  enabled: true\n  loaders: [{writable}]\n{extra}"
            )
        };
        let errors = Config::parse(&text("/srv/images/loaders", ""), "t.yaml")
            .expect_err("refused")
            .0;
        let e = errors
            .iter()
            .find(|e| e.field == "flash.loaders[0]")
            .unwrap_or_else(|| panic!("not blamed: {errors:?}"));
        assert!(
            e.message.contains("/srv/images")
                && e.message.contains("vm-a")
                && !e.message.contains("ops"),
            "{e}"
        );
        assert_eq!(e.line, 13, "{e}");
        // A root nobody writes: fine. The operator's explicit yes: fine.
        Config::parse(&text("/srv/loaders", ""), "t.yaml").expect("a read-only root");
        Config::parse(&text("/srv/images", "  loaders_writable: true\n"), "t.yaml")
            .expect("accepted knowingly");
        // A board's own loaders are held to the same rule.
        let board_own = "clients:\n  - name: vm-a\n    token: aaaaaaaaaaaaaaaaaaaaaaaa\n    write_roots: [/srv/images]\n\
             file_roots: [/srv/images]\nboards:\n  - name: vb1\n    usb: \"1-1\"\n    loaders: [/srv/images/l]\n\
             flash:\n  enabled: true\n";
        let errors = Config::parse(board_own, "t.yaml").expect_err("refused").0;
        assert!(
            errors
                .iter()
                .any(|e| e.field == "boards[0].loaders[0]" && e.message.contains("vm-a")),
            "{errors:?}"
        );
        // The generated token's client writes every root.
        let errors = Config::parse(
            &format!("file_roots: [/srv]\n{BOARD}flash:\n  enabled: true\n  loaders: [/srv/l]\n"),
            "t.yaml",
        )
        .expect_err("refused")
        .0;
        assert!(
            errors.iter().any(|e| e.message.contains("default")),
            "{errors:?}"
        );
    }

    #[test]
    fn unknown_board_client_and_bad_values_are_named_with_line_and_field() {
        let text = format!(
            "{BOARD}flash:\n  enabled: true\n  boards: [vb9]\n  clients: [nobody]\n  loaders: [rel/dir]\n  transfer_kib: 8\n  max_image_gib: 0\n"
        );
        let errors = Config::parse(&text, "t.yaml").expect_err("refused").0;
        let find = |field: &str| {
            errors
                .iter()
                .find(|e| e.field == field)
                .unwrap_or_else(|| panic!("{field} not blamed: {errors:?}"))
        };
        let e = find("flash.boards[0]");
        assert_eq!(e.line, 6, "{e}");
        assert!(e.message.contains("vb1"), "{e}");
        assert!(find("flash.clients[0]").message.contains("unknown client"));
        assert!(find("flash.loaders[0]").message.contains("absolute"));
        assert_eq!(find("flash.transfer_kib").line, 9);
        let e = find("flash.max_image_gib");
        assert_eq!(e.line, 10, "{e}");
        assert!(e.message.contains("16384"), "{e}");
    }
}
