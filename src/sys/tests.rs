//! Tests of `sys`.

use super::*;

#[test]
fn own_pid_is_alive() {
    assert_eq!(pid_status(std::process::id()), PidStatus::Alive);
}

#[test]
fn peer_cred_of_socketpair_is_self() {
    let (a, _b) = UnixStream::pair().unwrap();
    let cred = peer_cred(&a).unwrap();
    assert_eq!(cred.uid, euid());
    if cfg!(target_os = "linux") {
        assert_eq!(cred.pid, Some(std::process::id()));
    }
}

#[test]
fn sun_path_limit_is_plausible() {
    let n = max_socket_path();
    assert!((90..=1023).contains(&n), "{n}");
}

/// A connect that never waits: to a listener it is connected at once and
/// names the listener's pid (listening again keeps it ours); a socket
/// nobody listens on, or no socket, is refused at once. A full backlog is
/// tested in tests/security/verify.rs.
#[cfg(target_os = "linux")]
#[test]
fn connect_nowait_names_the_listener() {
    let dir = super::scratch("sys");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("l.sock");
    let missing = connect_nowait(&path).unwrap_err();
    assert_eq!(missing.raw_os_error(), Some(ENOENT), "{missing}");
    let listener = UnixListener::bind(&path).unwrap();
    listen_here(&listener).unwrap();
    let first = connect_nowait(&path).unwrap();
    assert_eq!(peer_cred(&first).unwrap().pid, Some(std::process::id()));
    drop(listener);
    let gone = connect_nowait(&path).unwrap_err();
    assert_eq!(gone.raw_os_error(), Some(ECONNREFUSED), "{gone}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each end of a connection names the other's process where the kernel
/// tells it: the client's to the server, and the server's to the client
/// (which sender verification reads); both are this one here.
#[test]
fn both_ends_of_a_connection_name_the_other() {
    let dir = super::scratch("sys-ends");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("l.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let client = connect_nowait(&path).unwrap();
    let (server, _) = listener.accept().unwrap();
    let (to_client, to_server) = (peer_cred(&client).unwrap(), peer_cred(&server).unwrap());
    assert_eq!((to_client.uid, to_server.uid), (euid(), euid()));
    if KNOWS_PEER_PID {
        let me = Some(std::process::id());
        assert_eq!((to_client.pid, to_server.pid), (me, me));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
