//! The work methods: `inbox/*`, `task/*`, `relay/send`, `turn/*` and
//! `message/send`.
