//! The per-cluster agent: watches the Pinterest kinds in its cluster, expands them into
//! native objects, applies and prunes them, and reports status.

pub mod status;
