//! redb factory (written with the redb backend issue).
