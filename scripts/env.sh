# Sourced by Lampyr's scripts: one cargo build cache outside the checkout, so
# fresh clones (CI) reuse compiled dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lampyr/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
