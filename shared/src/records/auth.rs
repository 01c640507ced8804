//! Clients and roles of the auth API. Each kind sits in one partition of the `auth` table so
//! that listing them is one query; they are few and read through caches (roles) or by key
//! (clients).
//!
//! | table  | pk        | sk       | what                                |
//! |--------|-----------|----------|-------------------------------------|
//! | `auth` | `clients` | clientId | a client of the auth API (with secret) |
//! | `auth` | `roles`   | roleId   | a role of the auth API              |

/// Clients and roles of the auth API.
pub const AUTH: &str = "auth";
/// Partition of every client in [`AUTH`].
pub const PK_CLIENTS: &str = "clients";
/// Partition of every role in [`AUTH`].
pub const PK_ROLES: &str = "roles";

/// `(pk, sk)` of a client's item in [`AUTH`].
pub fn client_key(client_id: &str) -> (&'static str, String) {
    (PK_CLIENTS, client_id.to_string())
}

/// `(pk, sk)` of a role's item in [`AUTH`].
pub fn role_key(role_id: &str) -> (&'static str, String) {
    (PK_ROLES, role_id.to_string())
}
