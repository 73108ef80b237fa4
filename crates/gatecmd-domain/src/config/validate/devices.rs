//! `devices:`: device classes, by USB id or by family and mode.

use super::super::raw::{RawDeviceClass, parse_hex16};
use super::super::schema::DeviceClass;
use super::super::values::check_name;
use super::validator::Validator;
use gatecmd_devices::families;

impl Validator {
    pub(super) fn devices(&mut self, raw: Vec<RawDeviceClass>) -> Vec<DeviceClass> {
        let mut out: Vec<DeviceClass> = Vec::new();
        for (i, d) in raw.into_iter().enumerate() {
            let at = self.at(&format!("devices[{i}].name"));
            if self
                .value(check_name(&d.name), at, format!("devices[{i}].name"))
                .is_none()
            {
                continue;
            }
            if out.iter().any(|o| o.name == d.name) {
                let at = self.at(&format!("devices[{i}].name"));
                self.err(
                    at,
                    format!("devices[{i}].name"),
                    format!("device class {:?} is defined twice", d.name),
                );
            }
            let m = &d.matches;
            let field = |f: &str| format!("devices[{i}].match.{f}");
            let vid = match &m.vid {
                None => Some(None),
                Some(v) => {
                    let written = self.pos.text(&field("vid"));
                    self.value(
                        parse_hex16(v, written),
                        self.at(&field("vid")),
                        field("vid"),
                    )
                    .map(Some)
                }
            };
            let pid = match &m.pid {
                None => Some(None),
                Some(p) => {
                    let written = self.pos.text(&field("pid"));
                    self.value(
                        parse_hex16(p, written),
                        self.at(&field("pid")),
                        field("pid"),
                    )
                    .map(Some)
                }
            };
            let family = match &m.family {
                None => Some(None),
                Some(f) => self
                    .value(
                        families::family_named(f).ok_or_else(|| {
                            format!(
                                "family {f:?} is not in the families table (docs/FAMILIES.md); \
                                 families: {}",
                                families::families().join(", ")
                            )
                        }),
                        self.at(&field("family")),
                        field("family"),
                    )
                    .map(Some),
            };
            let mode = match &m.mode {
                None => Some(None),
                Some(md) => self
                    .value(
                        families::mode_named(md).ok_or_else(|| {
                            format!(
                                "mode {md:?} is not a mode of the families table \
                                 (docs/FAMILIES.md); modes: {}",
                                families::modes().join(", ")
                            )
                        }),
                        self.at(&field("mode")),
                        field("mode"),
                    )
                    .map(Some),
            };
            if m.vid.is_none() && m.family.is_none() {
                let at = self.at(&format!("devices[{i}].match"));
                self.err(
                    at,
                    format!("devices[{i}].match"),
                    "a device class matches on `vid` (with `pid` if one product) or on \
                     `family` (with `mode` if one mode): give at least one of them"
                        .into(),
                );
            } else if m.pid.is_some() && m.vid.is_none() {
                let at = self.at(&field("pid"));
                self.err(
                    at,
                    field("pid"),
                    "a `pid` means nothing without its `vid`: add `vid:`".into(),
                );
            }
            let group = match d.lock_group {
                None => Some(None),
                Some(g) => {
                    let at = self.at(&format!("devices[{i}].lock_group"));
                    self.value(
                        check_name(&g).map(|_| Some(g)),
                        at,
                        format!("devices[{i}].lock_group"),
                    )
                }
            };
            if let (Some(vid), Some(pid), Some(family), Some(mode), Some(lock_group)) =
                (vid, pid, family, mode, group)
            {
                out.push(DeviceClass {
                    name: d.name,
                    vid,
                    pid,
                    family,
                    mode,
                    lock_group,
                });
            }
        }
        out
    }
}
