//! Lab names: a board of another host is `HOST/BOARD`, a lease there `HOST/LEASE` (the
//! host's exporter name, `labgrid.peers[].name`, then the name or id on that host).

/// `HOST/NAME` split at its one `/`, when both parts are there; `None` for a local name.
pub fn remote(name: &str) -> Option<(&str, &str)> {
    let (host, rest) = name.split_once('/')?;
    (!host.is_empty() && !rest.is_empty() && !rest.contains('/')).then_some((host, rest))
}

/// `HOST/NAME`.
pub fn qualify(host: &str, name: &str) -> String {
    format!("{host}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_slash_between_two_parts_is_remote() {
        assert_eq!(remote("bench-2/b3"), Some(("bench-2", "b3")));
        for local in ["b3", "/b3", "bench-2/", "a/b/c"] {
            assert_eq!(remote(local), None, "{local}");
        }
        assert_eq!(qualify("bench-2", "b3"), "bench-2/b3");
    }
}
