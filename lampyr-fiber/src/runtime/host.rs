//! The host functions a guest may call. There is one: Hyperlight's `HostPrint`,
//! replaced so guest output goes to `tracing` (bounded, never to the
//! process's stdout) and can neither block on a full pipe nor panic across
//! the guest boundary.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Longest guest print line logged; the rest is cut.
pub const MAX_PRINT_BYTES: usize = 4096;

/// `HostPrint`: logs the guest's text at debug level, cut to [`MAX_PRINT_BYTES`].
pub fn guest_print(text: String) -> i32 {
    catch_unwind(AssertUnwindSafe(|| {
        let len = text.len();
        let mut cut = len.min(MAX_PRINT_BYTES);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        tracing::debug!(target: "lampyr_guest", bytes = len, "{}", &text[..cut]);
        i32::try_from(len).unwrap_or(i32::MAX)
    }))
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_and_multibyte_prints_are_cut_safely() {
        let text = "é".repeat(super::MAX_PRINT_BYTES);
        assert_eq!(super::guest_print(text.clone()), text.len() as i32);
    }
}
