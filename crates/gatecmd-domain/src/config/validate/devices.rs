//! `devices:`: device classes and their USB ids.

use super::super::raw::{RawDeviceClass, parse_hex16};
use super::super::schema::DeviceClass;
use super::super::values::check_name;
use super::validator::Validator;

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
            let vid_field = format!("devices[{i}].match.vid");
            let vid = self.value(
                parse_hex16(&d.matches.vid, self.pos.text(&vid_field)),
                self.at(&vid_field),
                format!("devices[{i}].match.vid"),
            );
            let pid = match &d.matches.pid {
                None => Some(None),
                Some(p) => {
                    let pid_field = format!("devices[{i}].match.pid");
                    let written = self.pos.text(&pid_field);
                    self.value(parse_hex16(p, written), self.at(&pid_field), pid_field)
                        .map(Some)
                }
            };
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
            if let (Some(vid), Some(pid), Some(lock_group)) = (vid, pid, group) {
                out.push(DeviceClass {
                    name: d.name,
                    vid,
                    pid,
                    lock_group,
                });
            }
        }
        out
    }
}
