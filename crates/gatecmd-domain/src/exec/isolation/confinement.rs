//! Why the kernel refused a namespace: read after the child reported that `unshare` failed
//! with EPERM, so the refusal names the cause this process can see (its service unit's
//! seccomp filter, a missing capability, or the sysctl that really is off) instead of
//! listing every cause there could be.
//!
//! Read in the server (the parent), from `/proc`, never in the forked child.

/// What this process and the host say about namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// `/proc/sys/user/max_user_namespaces`.
    pub max_user_namespaces: Option<String>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's patch; absent elsewhere).
    pub unprivileged_userns_clone: Option<String>,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns` (Ubuntu; absent elsewhere).
    pub apparmor_restrict_unprivileged_userns: Option<String>,
    /// The `Seccomp:` field of `/proc/self/status` (0 none, 1 strict, 2 filter).
    pub seccomp: Option<String>,
    /// The `CapEff:` field of `/proc/self/status` (hex).
    pub cap_eff: Option<String>,
    /// Started by systemd as a unit (`$INVOCATION_ID` is set for every unit's processes).
    pub under_systemd: bool,
}

const CAP_SYS_ADMIN: u32 = 21;

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    })
}

impl Confinement {
    /// Reads the facts of this process and host.
    pub fn read() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Confinement {
            max_user_namespaces: read_trimmed("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_trimmed("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor_restrict_unprivileged_userns: read_trimmed(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
            seccomp: status_field(&status, "Seccomp"),
            cap_eff: status_field(&status, "CapEff"),
            under_systemd: std::env::var_os("INVOCATION_ID").is_some_and(|v| !v.is_empty()),
        }
    }

    fn seccomp_filter(&self) -> bool {
        self.seccomp.as_deref().is_some_and(|s| s != "0")
    }

    fn seccomp_cause(&self) -> Option<String> {
        if !self.seccomp_filter() {
            return None;
        }
        let mode = self.seccomp.as_deref().unwrap_or("?");
        Some(if self.under_systemd {
            format!(
                "the service's unit forbids namespaces: systemd put a seccomp filter on gatecmd (Seccomp: {mode} in /proc/self/status), which is how RestrictNamespaces= refuses unshare. Allow the namespaces isolation needs in the unit (RestrictNamespaces=user mnt, as the packaged gatecmd.service has; `systemctl edit gatecmd`), then restart it"
            )
        } else {
            format!(
                "a seccomp filter on gatecmd's process refuses unshare (Seccomp: {mode} in /proc/self/status; a container runtime's or a supervisor's filter). Allow unshare of user and mount namespaces in that filter"
            )
        })
    }

    /// The cause of an EPERM from `unshare(CLONE_NEWUSER | CLONE_NEWNS)` as a non-root user.
    pub fn userns_cause(&self) -> String {
        let mut causes: Vec<String> = self.seccomp_cause().into_iter().collect();
        if self.max_user_namespaces.as_deref() == Some("0") {
            causes.push("this host does not allow unprivileged user namespaces (sysctl user.max_user_namespaces=0). Raise it, or run gatecmd as root".to_owned());
        }
        if self.unprivileged_userns_clone.as_deref() == Some("0") {
            causes.push("this host does not allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=0). Set it to 1, or run gatecmd as root".to_owned());
        }
        if self.apparmor_restrict_unprivileged_userns.as_deref() == Some("1") {
            causes.push("AppArmor restricts unprivileged user namespaces on this host (sysctl kernel.apparmor_restrict_unprivileged_userns=1). Give gatecmd a profile with `userns,`, set the sysctl to 0, or run gatecmd as root".to_owned());
        }
        if causes.is_empty() {
            causes.push("no sysctl forbids unprivileged user namespaces and gatecmd's process has no seccomp filter, so something else refused it (a security module? see `journalctl -k`)".to_owned());
        }
        format!(
            "creating a user namespace was refused: {}",
            causes.join("; also, ")
        )
    }

    /// The cause of an EPERM from `unshare(CLONE_NEWNS)` as root.
    pub fn mountns_cause(&self) -> String {
        let mut causes: Vec<String> = self.seccomp_cause().into_iter().collect();
        let has_admin = self
            .cap_eff
            .as_deref()
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .map(|caps| caps & (1u64 << CAP_SYS_ADMIN) != 0);
        if has_admin == Some(false) {
            causes.push(if self.under_systemd {
                "gatecmd lacks CAP_SYS_ADMIN (the unit's CapabilityBoundingSet= leaves it out). Add CAP_SYS_ADMIN to the unit's CapabilityBoundingSet=, or run it as a user other than root (a user namespace then gives the right to mount)".to_owned()
            } else {
                "gatecmd lacks CAP_SYS_ADMIN (a container without it?). Give it CAP_SYS_ADMIN".to_owned()
            });
        }
        if causes.is_empty() {
            causes.push("gatecmd has CAP_SYS_ADMIN and no seccomp filter, so something else refused it (a security module? see `journalctl -k`)".to_owned());
        }
        format!(
            "creating a mount namespace was refused although gatecmd runs as root: {}",
            causes.join("; also, ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_host() -> Confinement {
        Confinement {
            max_user_namespaces: Some("63000".into()),
            unprivileged_userns_clone: Some("1".into()),
            apparmor_restrict_unprivileged_userns: None,
            seccomp: Some("0".into()),
            cap_eff: Some("0000000000000000".into()),
            under_systemd: false,
        }
    }

    #[test]
    fn a_unit_filter_is_named_and_the_sysctls_are_not() {
        // The packaged unit with RestrictNamespaces=yes on a host whose sysctls allow
        // user namespaces (issue 38: the refusal blamed the sysctls).
        let c = Confinement {
            seccomp: Some("2".into()),
            under_systemd: true,
            ..open_host()
        };
        let why = c.userns_cause();
        assert!(
            why.contains("the service's unit forbids namespaces"),
            "{why}"
        );
        assert!(why.contains("RestrictNamespaces="), "{why}");
        assert!(!why.contains("sysctl"), "{why}");
    }

    #[test]
    fn a_sysctl_is_named_only_when_it_is_off() {
        let c = Confinement {
            unprivileged_userns_clone: Some("0".into()),
            ..open_host()
        };
        let why = c.userns_cause();
        assert!(why.contains("kernel.unprivileged_userns_clone=0"), "{why}");
        assert!(!why.contains("max_user_namespaces"), "{why}");
        assert!(!why.contains("unit"), "{why}");
        let c = Confinement {
            max_user_namespaces: Some("0".into()),
            ..open_host()
        };
        assert!(c.userns_cause().contains("user.max_user_namespaces=0"));
        let c = Confinement {
            apparmor_restrict_unprivileged_userns: Some("1".into()),
            ..open_host()
        };
        assert!(c.userns_cause().contains("AppArmor"));
    }

    #[test]
    fn a_filter_outside_systemd_is_not_blamed_on_a_unit() {
        let c = Confinement {
            seccomp: Some("2".into()),
            ..open_host()
        };
        let why = c.userns_cause();
        assert!(
            why.contains("a seccomp filter on gatecmd's process"),
            "{why}"
        );
        assert!(!why.contains("unit"), "{why}");
    }

    #[test]
    fn nothing_seen_says_so() {
        let why = open_host().userns_cause();
        assert!(why.contains("no sysctl forbids"), "{why}");
    }

    #[test]
    fn root_without_cap_sys_admin_names_the_bounding_set_under_systemd() {
        let c = Confinement {
            under_systemd: true,
            ..open_host()
        };
        let why = c.mountns_cause();
        assert!(why.contains("CapabilityBoundingSet="), "{why}");
        let c = Confinement {
            cap_eff: Some("000001ffffffffff".into()),
            ..open_host()
        };
        assert!(c.mountns_cause().contains("something else"));
    }

    #[test]
    fn status_fields_are_read() {
        let s = "Name:\tgatecmd\nCapEff:\t0000000000200000\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        assert_eq!(status_field(s, "Seccomp").as_deref(), Some("2"));
        assert_eq!(
            status_field(s, "CapEff").as_deref(),
            Some("0000000000200000")
        );
    }
}
