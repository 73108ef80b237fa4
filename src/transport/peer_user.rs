//! Which local user owns the other end of a TCP connection, asked of the kernel.
//!
//! A NAT guest (VirtualBox, QEMU user networking) reaches the host's loopback, so a
//! loopback peer is not a credential (docs/SECURITY.md). Raw-TCP protocols that carry no
//! credential of their own (labgrid's serial port, its `rest` power model) can still be
//! tied to a person: a peer on this host is a socket some local user's process created,
//! and the kernel knows whose. `SO_PEERCRED` answers that for unix sockets only; for TCP
//! the socket-diagnostics netlink family (`NETLINK_SOCK_DIAG`, what `ss -e` uses) looks up
//! the peer's socket by its address tuple and reports the uid that created it. A VM's
//! connections are its emulator's sockets: they carry the uid the VM runs as.
//!
//! A peer on another host has no socket here: the lookup finds nothing and the caller
//! refuses (`None`). The mechanism's limits are in docs/LAB.md ("Who may use the ports").

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A local user, as the kernel names the owner of a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerUser {
    pub uid: u32,
    /// The account name (`getpwuid`), or the number where the account has none.
    pub name: String,
}

/// The local user that owns the client end of the TCP connection `peer` → `local`, or
/// `None` when no socket on this host matches (the peer is remote, or already closed).
/// Errors are the netlink socket's own (no `sock_diag` in this kernel, say).
pub fn peer_user(peer: SocketAddr, local: SocketAddr) -> io::Result<Option<PeerUser>> {
    let Some(uid) = lookup_uid(peer, local)? else {
        return Ok(None);
    };
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string());
    Ok(Some(PeerUser { uid, name }))
}

// linux/sock_diag.h and linux/inet_diag.h: the request and the answer's fixed part.
const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_NOCOOKIE: u32 = !0;
/// Every TCP state (`idiag_states` is a bit mask indexed by state).
const ALL_STATES: u32 = !0;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

/// `struct inet_diag_sockid`: ports and addresses in network byte order.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    interface: u32,
    cookie: [u32; 2],
}

/// `struct inet_diag_req_v2`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct DiagRequest {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Request {
    hdr: NlMsgHdr,
    req: DiagRequest,
}

/// Offset of `idiag_uid` in `struct inet_diag_msg`: family, state, timer, retrans (4
/// bytes), the 48-byte `inet_diag_sockid`, then expires, rqueue, wqueue (12 bytes).
const UID_OFFSET: usize = 4 + size_of::<SockId>() + 12;

fn family_and_bytes(ip: IpAddr) -> (u8, [u8; 16]) {
    let mut out = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            (libc::AF_INET as u8, out)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            // A v4 client of a dual-stack listener is an AF_INET socket on its side.
            Some(v4) => {
                out[..4].copy_from_slice(&v4.octets());
                (libc::AF_INET as u8, out)
            }
            None => (libc::AF_INET6 as u8, v6.octets()),
        },
    }
}

fn lookup_uid(peer: SocketAddr, local: SocketAddr) -> io::Result<Option<u32>> {
    let (family, src) = family_and_bytes(peer.ip());
    let (local_family, dst) = family_and_bytes(local.ip());
    if family != local_family {
        return Ok(None);
    }
    // The kernel finds the socket that receives from dst:dport at src:sport, i.e. the
    // peer's own socket (local end = the peer's address).
    let request = Request {
        hdr: NlMsgHdr {
            len: size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: libc::NLM_F_REQUEST as u16,
            seq: 1,
            pid: 0,
        },
        req: DiagRequest {
            family,
            protocol: libc::IPPROTO_TCP as u8,
            states: ALL_STATES,
            id: SockId {
                sport: peer.port().to_be_bytes(),
                dport: local.port().to_be_bytes(),
                src,
                dst,
                interface: 0,
                cookie: [INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE],
            },
            ..Default::default()
        },
    };
    // SAFETY: a plain socket(2) call; the descriptor is owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `request` is a repr(C) value of the length passed; the kernel reads it only.
    let sent = unsafe {
        libc::send(
            fd.as_raw_fd(),
            (&request as *const Request).cast(),
            size_of::<Request>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 1024];
    // SAFETY: the buffer is writable for its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    parse_answer(&buf[..n as usize])
}

/// The uid in a `SOCK_DIAG_BY_FAMILY` answer; `None` for `NLMSG_ERROR` (ENOENT: no such
/// socket here).
fn parse_answer(answer: &[u8]) -> io::Result<Option<u32>> {
    let hdr_len = size_of::<NlMsgHdr>();
    if answer.len() < hdr_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "sock_diag: short answer",
        ));
    }
    let kind = u16::from_ne_bytes([answer[4], answer[5]]);
    if kind == libc::NLMSG_ERROR as u16 {
        let code = answer
            .get(hdr_len..hdr_len + 4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        return match -code {
            0 | libc::ENOENT => Ok(None),
            e => Err(io::Error::from_raw_os_error(e)),
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("sock_diag: unexpected answer type {kind}"),
        ));
    }
    let at = hdr_len + UID_OFFSET;
    let Some(b) = answer.get(at..at + 4) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "sock_diag: answer too short for a uid",
        ));
    };
    Ok(Some(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_owner_of_a_loopback_client_is_this_process_user() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let local = listener.local_addr().expect("addr");
        let _client = TcpStream::connect(local).expect("connect");
        let (_server, peer) = listener.accept().expect("accept");
        let who = peer_user(peer, local)
            .expect("sock_diag answers")
            .expect("the client's socket is on this host");
        assert_eq!(who.uid, nix::unistd::getuid().as_raw());
    }

    #[test]
    fn a_tuple_with_no_socket_is_nobody() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let local = listener.local_addr().expect("addr");
        // Nothing connects from this port.
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        assert_eq!(peer_user(peer, local).expect("sock_diag answers"), None);
    }
}
