//! Fail points for the crash and fault tests: `BATON_FAILPOINT=NAME:ACTION`
//! makes the named point exit the process (`exit`, status 86), fail with an
//! I/O error (`error`) or panic (`panic`). Compiled in only with the
//! `failpoints` cargo feature, which release builds do not enable; without
//! it every point is a no-op the optimizer removes.

#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> std::io::Result<()> {
    use std::sync::OnceLock;
    static SPEC: OnceLock<Option<(String, String)>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var("BATON_FAILPOINT").ok()?;
        let (n, a) = v.split_once(':')?;
        Some((n.to_string(), a.to_string()))
    });
    match spec {
        Some((n, a)) if n == name => match a.as_str() {
            "exit" => std::process::exit(86),
            "panic" => panic!("fail point {name}"),
            _ => Err(std::io::Error::other(format!("fail point {name}"))),
        },
        _ => Ok(()),
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) -> std::io::Result<()> {
    Ok(())
}
