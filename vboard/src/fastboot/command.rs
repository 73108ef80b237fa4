//! The fastboot wire protocol's text parts (AOSP system/core/fastboot, platform-tools
//! 29.0.6): a command is one bulk OUT transfer of at most 64 bytes (`FB_COMMAND_SZ`,
//! `fastboot_driver.cpp RawCommand`), `name[:arg[:arg…]]` (fastbootd splits on `:`,
//! `device/fastboot_device.cpp`); every answer is one bulk IN transfer of at most 256 bytes
//! (`FB_RESPONSE_SZ`): a 4-byte status `OKAY`/`FAIL`/`INFO`/`DATA` then text
//! (`fastboot_driver.cpp HandleResponse`). `DATA` carries the byte count in 8 hex digits
//! (`download:%08x` asks for it, `DATA%08x` grants it).

pub const MAX_COMMAND: usize = 64;
pub const MAX_RESPONSE: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `getvar:NAME[:ARG…]`, e.g. `getvar:partition-size:boot`.
    GetVar {
        name: String,
        args: Vec<String>,
    },
    /// `download:SIZE` (hex).
    Download(u32),
    Flash(String),
    Erase(String),
    Reboot,
    RebootBootloader,
    Continue,
    /// A command fastboot knows that this board does not do, and why.
    Unsupported {
        name: String,
        why: &'static str,
    },
    /// Anything else (fastbootd: `Unrecognized command NAME`).
    Unknown(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    TooLong(usize),
    NotText,
    Empty,
    MissingArgument(&'static str),
    BadSize(String),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::TooLong(n) => write!(
                f,
                "command of {n} bytes (fastboot sends at most {MAX_COMMAND})"
            ),
            ParseError::NotText => write!(f, "command is not UTF-8 text"),
            ParseError::Empty => write!(f, "empty command"),
            ParseError::MissingArgument(what) => write!(f, "missing argument: {what}"),
            ParseError::BadSize(s) => write!(
                f,
                "invalid size {s:?} (expected 1 to 8 hex digits, as download:%08x sends)"
            ),
        }
    }
}

/// Parses one command transfer.
pub fn parse(raw: &[u8]) -> Result<Command, ParseError> {
    if raw.len() > MAX_COMMAND {
        return Err(ParseError::TooLong(raw.len()));
    }
    let text = std::str::from_utf8(raw).map_err(|_| ParseError::NotText)?;
    if text.is_empty() {
        return Err(ParseError::Empty);
    }
    let (name, rest) = match text.split_once(':') {
        Some((n, r)) => (n, Some(r)),
        None => (text, None),
    };
    let arg = |what| match rest {
        Some(r) if !r.is_empty() => Ok(r.to_string()),
        _ => Err(ParseError::MissingArgument(what)),
    };
    Ok(match name {
        "getvar" => {
            let mut parts = arg("variable")?
                .split(':')
                .map(str::to_string)
                .collect::<Vec<_>>();
            let name = parts.remove(0);
            Command::GetVar { name, args: parts }
        }
        "download" => {
            let s = arg("size")?;
            if s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ParseError::BadSize(s));
            }
            Command::Download(u32::from_str_radix(&s, 16).map_err(|_| ParseError::BadSize(s))?)
        }
        "flash" => Command::Flash(arg("partition")?),
        "erase" => Command::Erase(arg("partition")?),
        "reboot" if rest.is_none() => Command::Reboot,
        "reboot-bootloader" => Command::RebootBootloader,
        "continue" => Command::Continue,
        "reboot-recovery" | "reboot-fastboot" => Command::Unsupported {
            name: name.to_string(),
            why: "this board has no recovery and no userspace fastboot",
        },
        "set_active" => Command::Unsupported {
            name: name.to_string(),
            why: "this board has no A/B slots (slot-count 0)",
        },
        "boot" | "upload" | "oem" | "flashing" | "signature" | "snapshot-update" => {
            Command::Unsupported {
                name: name.to_string(),
                why: "not implemented by the vboard",
            }
        }
        _ => Command::Unknown(name.to_string()),
    })
}

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Okay(String),
    Fail(String),
    Info(String),
    Data(u32),
}

impl Response {
    /// The transfer's bytes; text beyond 256 bytes in all is cut (fastboot reads 256).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (tag, text) = match self {
            Response::Okay(t) => ("OKAY", t.clone()),
            Response::Fail(t) => ("FAIL", t.clone()),
            Response::Info(t) => ("INFO", t.clone()),
            Response::Data(n) => ("DATA", format!("{n:08x}")),
        };
        let mut out = tag.as_bytes().to_vec();
        out.extend(text.as_bytes());
        out.truncate(MAX_RESPONSE);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_fastboot_29_sends_parse() {
        assert_eq!(
            parse(b"getvar:product"),
            Ok(Command::GetVar {
                name: "product".into(),
                args: vec![]
            })
        );
        assert_eq!(
            parse(b"getvar:partition-size:boot"),
            Ok(Command::GetVar {
                name: "partition-size".into(),
                args: vec!["boot".into()]
            })
        );
        assert_eq!(
            parse(b"download:00300000"),
            Ok(Command::Download(0x30_0000))
        );
        assert_eq!(parse(b"flash:boot"), Ok(Command::Flash("boot".into())));
        assert_eq!(
            parse(b"erase:userdata"),
            Ok(Command::Erase("userdata".into()))
        );
        assert_eq!(parse(b"reboot"), Ok(Command::Reboot));
        assert_eq!(parse(b"reboot-bootloader"), Ok(Command::RebootBootloader));
        assert_eq!(parse(b"continue"), Ok(Command::Continue));
        assert!(matches!(
            parse(b"reboot-fastboot"),
            Ok(Command::Unsupported { .. })
        ));
        assert_eq!(
            parse(b"frobnicate"),
            Ok(Command::Unknown("frobnicate".into()))
        );
    }

    #[test]
    fn bad_commands_say_why() {
        assert_eq!(parse(&[b'a'; 65]), Err(ParseError::TooLong(65)));
        assert_eq!(parse(b""), Err(ParseError::Empty));
        assert_eq!(parse(&[0xff, 0xfe]), Err(ParseError::NotText));
        assert_eq!(
            parse(b"flash"),
            Err(ParseError::MissingArgument("partition"))
        );
        assert_eq!(
            parse(b"flash:"),
            Err(ParseError::MissingArgument("partition"))
        );
        assert_eq!(
            parse(b"download:123456789"),
            Err(ParseError::BadSize("123456789".into()))
        );
        assert_eq!(
            parse(b"download:xyz"),
            Err(ParseError::BadSize("xyz".into()))
        );
        let e = parse(b"download:-1").expect_err("sign");
        assert!(e.to_string().contains("hex digits"), "{e}");
    }

    #[test]
    fn responses_are_framed_and_capped_at_256_bytes() {
        assert_eq!(Response::Data(0x1000).to_bytes(), b"DATA00001000");
        assert_eq!(Response::Okay(String::new()).to_bytes(), b"OKAY");
        assert_eq!(Response::Fail("no".into()).to_bytes(), b"FAILno");
        assert_eq!(
            Response::Info("x".repeat(400)).to_bytes().len(),
            MAX_RESPONSE
        );
    }
}
