//! fiberd: the node daemon that loads the Homes of its grants and serves
//! their fibers to fiber-router. See `docs/cluster.md`.
