#!/usr/bin/env bash
# Builds flashcl-bench once per set of kernel options, so that one device
# call can time them side by side (each option set is compiled into its
# binary: cmake's FLASHCL_KERNEL_DEFINES).
#
#   tools/compare/build-variants.sh OUTDIR NAME=OPTIONS...
#
# Each NAME gets OUTDIR/NAME/flashcl-bench (NAME= with nothing after it:
# the tree as it is; NAME@REV=OPTIONS: the commit REV instead, checked out
# once as a git worktree under BUILD_ROOT, which `git worktree prune` drops
# once the folder is gone), built in a folder of its own under BUILD_ROOT
# (default /tmp/flashcl-variants), kept between runs so that a rebuild
# compiles only what changed. TARGETS (default flashcl-bench) names more
# targets to build and copy beside it, tests included (tests/test_mla).
# Example:
#   tools/compare/build-variants.sh .gpu/x c= v2="-DV_CHUNK=2" \
#     cap="-DMMA_REQD_WG=0 -cl-nv-maxrregcount=128" before@6b605d9=
set -euo pipefail
usage="usage: build-variants.sh OUTDIR NAME=OPTIONS..."
out="${1:?$usage}"
shift
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
src="$(cd "$(dirname "$0")/../.." && pwd)"
root="${BUILD_ROOT:-/tmp/flashcl-variants}"
mkdir -p "$root"
read -r -a targets <<< "${TARGETS:-flashcl-bench}"
for spec in "$@"; do
  case "$spec" in
    *=*) ;;
    *) echo "build-variants: '$spec' is not NAME=OPTIONS" >&2; exit 2 ;;
  esac
  name="${spec%%=*}" options="${spec#*=}" tree="$src" rev=""
  case "$name" in *@*) rev="${name#*@}" name="${name%%@*}" ;; esac
  case "$name" in
    '' | */* | .*) echo "build-variants: '$name' is not a folder name" >&2; exit 2 ;;
  esac
  if [ -n "$rev" ]; then
    commit="$(git -C "$src" rev-parse --verify -q "$rev^{commit}")" ||
      { echo "build-variants: '$rev' is no commit of $src" >&2; exit 2; }
    tree="$root/src-$commit"
    [ -d "$tree" ] || git -C "$src" worktree add -q --detach "$tree" "$commit" ||
      { echo "build-variants: cannot check out $rev into $tree" >&2; exit 1; }
  fi
  dir="$root/$name${rev:+-${commit:0:12}}"
  echo "== $name: ${rev:-the tree}${options:+, $options}"
  cmake -S "$tree" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DFLASHCL_KERNEL_DEFINES="$options" > "$dir.log" 2>&1 ||
    { echo "build-variants: cmake failed for $name: $dir.log" >&2; exit 1; }
  make -C "$dir" -j"$(nproc)" "${targets[@]}" >> "$dir.log" 2>&1 ||
    { echo "build-variants: make failed for $name: $dir.log" >&2; exit 1; }
  mkdir -p "$out/$name"
  for target in "${targets[@]}"; do
    built="$(find "$dir/tools" "$dir/tests" -maxdepth 1 -type f -name "$target" | head -1)"
    [ -n "$built" ] || { echo "build-variants: no $target in $dir" >&2; exit 1; }
    cp "$built" "$out/$name/"
  done
done
