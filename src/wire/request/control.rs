//! The operator's methods: `control/*`, `approval/*`, `permission/ask`,
//! `initialize`, `ping`, `agent/info` and `events/subscribe`.
