# Sourced by Lampyr's scripts: one cargo build cache outside the checkout, so
# fresh clones (CI) reuse compiled dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lampyr/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

# Crates that bake their checkout's path in (env!("CARGO_MANIFEST_DIR")) are not rebuilt by
# cargo when the same cache served another checkout path with newer builds: make them newer
# than those builds whenever the checkout using the cache changes.
lampyr_checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$(cat "$CARGO_TARGET_DIR/.lampyr-checkout" 2>/dev/null)" != "$lampyr_checkout" ]; then
  grep -rl --include='*.rs' --exclude-dir=target 'CARGO_MANIFEST_DIR' "$lampyr_checkout" | xargs -r touch
  mkdir -p "$CARGO_TARGET_DIR" && printf '%s\n' "$lampyr_checkout" > "$CARGO_TARGET_DIR/.lampyr-checkout"
fi
unset lampyr_checkout
