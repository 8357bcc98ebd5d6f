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
