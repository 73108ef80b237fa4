//! The Rockchip board as the control socket and `serve` see every board ([`Powered`]): the
//! same answers as before the other families existed, plus `family`.

use std::path::PathBuf;

use super::{Board, State};
use crate::family::{Family, Powered, ReadyLine};

impl Powered for Board {
    fn name(&self) -> &str {
        &self.name
    }

    fn power_on(&self, recovery: bool) -> Result<&'static str, String> {
        Board::power_on(self, recovery).map(State::as_str)
    }

    fn power_off(&self) -> Result<&'static str, String> {
        Board::power_off(self).map(State::as_str)
    }

    fn status(&self) -> serde_json::Value {
        let (ru, cu) = self.udcs();
        let (rp, cp) = self.ports();
        let (rb, cb) = self.bound();
        let regions: Vec<serde_json::Value> = self
            .flash
            .peek_regions()
            .ranges()
            .iter()
            .map(|&(s, e)| serde_json::json!({"lba": s, "sectors": e - s}))
            .collect();
        serde_json::json!({
            "name": self.name,
            "family": "rockchip",
            "state": self.state().as_str(),
            "rockusb": {"udc": ru, "port": rp, "bound": rb},
            "console": {"udc": cu, "port": cp, "bound": cb, "tty": self.tty()},
            "flash": {"path": self.flash.path(), "bytes": self.flash.sectors() * 512},
            "regions": regions,
        })
    }

    fn ready_line(&self) -> String {
        let (ru, cu) = self.udcs();
        ReadyLine {
            name: &self.name,
            kind: "rockusb",
            udc: ru,
            console_udc: cu,
            tty: &self.tty(),
            flash: self.flash.path(),
            bytes: self.flash.sectors() * 512,
            family: Family::Rockchip,
        }
        .to_string()
    }

    fn shutdown(&self) {
        Board::shutdown(self);
    }

    fn ffs_dirs(&self) -> Vec<PathBuf> {
        self.ffs_dirs.to_vec()
    }
}
