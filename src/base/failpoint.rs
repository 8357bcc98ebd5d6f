//! Fail points for the crash and fault tests: `BATON_FAILPOINT=NAME:ACTION`
//! makes the named point exit the process (`exit`, status 86), fail with an
//! I/O error (`error`), fail with a particular error number (`emfile`,
//! `enfile`, `enomem`, `eagain`, `eio`, `enospc`), panic (`panic`), or
//! stall for a while and then pass (`sleep=MS`; `claim-answer:sleep=MS`
//! holds back the answer to an `inbox/claim` after the task is claimed).
//! `ACTION*N` acts at the first N hits only, then the point passes, as a
//! resource that ran short comes back; several points are separated by
//! commas. Compiled in only with the `failpoints` cargo feature, which
//! release builds do not enable; without it every point is a no-op the
//! optimizer removes.

#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> std::io::Result<()> {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    /// A point: its name, its action, and how many hits it still acts at.
    type Point = (String, String, AtomicU64);
    static SPEC: OnceLock<Vec<Point>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| {
        let v = crate::base::config::baton_failpoint();
        v.split(',')
            .filter_map(|p| {
                let (n, a) = p.split_once(':')?;
                let (a, times) = match a.split_once('*') {
                    Some((a, t)) => (a, t.parse().ok()?),
                    None => (a, u64::MAX),
                };
                Some((n.to_string(), a.to_string(), AtomicU64::new(times)))
            })
            .collect()
    });
    let Some((_, action, left)) = spec.iter().find(|(n, _, _)| n == name) else {
        return Ok(());
    };
    let acts = left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if !acts {
        return Ok(());
    }
    match action.as_str() {
        "exit" => std::process::exit(86),
        "panic" => panic!("fail point {name}"),
        a if a.starts_with("sleep=") => {
            let ms = a["sleep=".len()..].parse().unwrap_or(0);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            Ok(())
        }
        a => match crate::sys::errno_named(a) {
            Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            None => Err(std::io::Error::other(format!("fail point {name}"))),
        },
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) -> std::io::Result<()> {
    Ok(())
}
