//! The fiber policy of one Revision. The types live in `lampyr-api` (a Home
//! carries the policy on the wire); this module keeps their runtime path.

pub use lampyr_api::policy::*;
