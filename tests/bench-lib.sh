# shellcheck shell=bash disable=SC2034  # its variables serve the scripts that source it
# Sourced by the flashcl-bench tests (tests/bench-*.sh) after `set -euo
# pipefail`, with the bench's path as $1: sets bench, tmp (removed on
# exit), device (the test suites' device, if FLASHCL_TEST_DEVICE names
# one) and failures, and defines fail and field.
bench="${1:?usage: $(basename "$0") FLASHCL_BENCH}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
device=()
[ -n "${FLASHCL_TEST_DEVICE:-}" ] && device=(--device "$FLASHCL_TEST_DEVICE")
failures=0
# fail WHAT: counts and prints a failure
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# field NAME JSON_LINE: the first value of "NAME" in the line, as written
field() { grep -o "\"$1\": [^,}]*" <<<"$2" | head -1 | sed 's/^[^:]*: //'; }
