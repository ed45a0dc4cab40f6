//! sled factory (written with the sled backend issue).
