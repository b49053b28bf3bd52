#!/usr/bin/env bash
# Makes the GPU vendors' own kernel compilers available on this machine, so
# that scripts/vendor-compile.sh can report what Intel's and AMD's real
# compilers make of a kernel (registers, spills, scratch, local memory)
# without any such GPU here.
#
# Intel: ocloc and IGC from Debian's intel-opencl-icd and its libraries. The
# package is NOT installed: installing it registers Intel's ICD in
# /etc/OpenCL/vendors, after which every AddressSanitizer-built binary aborts
# at start and a platform without devices appears. Its .debs are fetched with
# `apt-get download` and unpacked with `dpkg -x` into a private folder, with
# whatever libraries they need that the system lacks; the ICD files are then
# deleted from that folder, and bin/ocloc there is a wrapper that runs the real
# one with LD_LIBRARY_PATH set for that process alone.
#
# AMD: clang-15 with Debian's rocm-device-libs (bitcode only, no ICD: an
# ordinary apt install). clang 14 cannot read those 5.2.3 bitcode files, which
# LLVM 15 wrote, and compiling without them (-nogpulib) turns the built-ins
# into external calls, which makes every figure meaningless.
#
# Idempotent: a second run checks what it set up (quickly) and changes
# nothing. It prints the paths it set up, also written to paths.sh in the
# tools folder, which vendor-compile.sh reads.
#
# Usage: scripts/vendor-tools.sh [--help]
# Environment: FLASHCL_VENDOR_TOOLS  the tools folder (default build/vendor-tools)
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) echo "vendor-tools: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

repo="$(cd "$(dirname "$0")/.." && pwd)"
tools="${FLASHCL_VENDOR_TOOLS:-$repo/build/vendor-tools}"
mkdir -p "$tools"
tools="$(cd "$tools" && pwd)"

say() { echo "vendor-tools: $*" >&2; }
die() { say "$*"; exit 1; }

updated=0
apt_update_once() {  # a package list may be missing or stale on a new machine
  if [ "$updated" -eq 0 ]; then
    say "apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    updated=1
  fi
}

installed() {  # package: is it installed on the system?
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

apt_install() {  # packages: an ordinary install, for those that are harmless
  local missing=() p
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "needs root to apt-get install ${missing[*]}"
  say "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local log
  log="$(mktemp)"
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" > "$log" 2>&1; then
    apt_update_once
    apt-get install -y -qq --no-install-recommends "${missing[@]}" > "$log" 2>&1 ||
      { cat "$log" >&2; rm -f "$log"; die "apt-get install ${missing[*]} failed"; }
  fi
  rm -f "$log"
}

# ---------------------------------------------------------------- Intel
intel="$tools/intel"
wrapper="$tools/bin/ocloc"

# The libraries a private copy of ocloc resolves, checked with ldd: prints the
# missing ones, if any.
intel_missing_libs() {  # root
  local root="$1" libdir
  libdir="$(dirname "$(find "$root" -name libocloc.so -print -quit)")"
  LD_LIBRARY_PATH="$libdir" ldd "$root/usr/bin/ocloc" "$libdir"/*.so* 2>/dev/null |
    awk '/not found/ {print $1}' | sort -u
}

intel_setup() {
  # The seed: ocloc's package and the compiler libraries it loads (libocloc
  # dlopens libigdfcl, the front end, and libigc, the back end). Their own
  # dependencies follow below when the system lacks them.
  local seed=(intel-opencl-icd libigc1 libigdfcl1 libigdgmm12 libllvmspirvlib14 libopencl-clang14)
  local dl new queue=() done_list=() p deb dep
  dl="$(mktemp -d)"
  new="$(mktemp -d "$tools/intel.new.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$dl' '$new'" EXIT
  # apt-get download fetches as the unprivileged _apt user where it can
  if id _apt > /dev/null 2>&1; then chown _apt "$dl" 2> /dev/null || true; fi
  queue=("${seed[@]}")
  while [ "${#queue[@]}" -gt 0 ]; do
    say "apt-get download ${queue[*]}"
    (cd "$dl" && apt-get download -qq "${queue[@]}" >&2) ||
      { apt_update_once; (cd "$dl" && apt-get download -qq "${queue[@]}" >&2); } ||
      die "apt-get download ${queue[*]} failed"
    done_list+=("${queue[@]}")
    local next=()
    for p in "${queue[@]}"; do
      [ "$p" = intel-opencl-icd ] && continue  # its dependencies are the seed (and the ICD loader)
      deb="$(ls "$dl/${p}_"*.deb)"
      # each dependency, first of its alternatives, without a version
      for dep in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' | tr -d ' '); do
        case " ${done_list[*]} ${next[*]} " in *" $dep "*) continue ;; esac
        installed "$dep" && continue
        apt-cache show "$dep" > /dev/null 2>&1 || continue  # a virtual package
        next+=("$dep")
      done
    done
    queue=("${next[@]+"${next[@]}"}")
  done
  for deb in "$dl"/*.deb; do dpkg -x "$deb" "$new"; done
  # The ICD registration, the OpenCL and Level Zero drivers and the docs: not
  # needed by ocloc, and nothing here may look like an installable driver.
  rm -rf "${new:?}/etc" "${new:?}/usr/share" "${new:?}/usr/include"
  find "$new" \( -name 'intel-opencl' -o -name 'libze_intel_gpu.so*' -o -name 'libOpenCL.so*' \) \
    -prune -exec rm -rf {} +
  [ -x "$new/usr/bin/ocloc" ] || die "no usr/bin/ocloc in intel-opencl-icd"
  local missing
  missing="$(intel_missing_libs "$new")"
  [ -z "$missing" ] || die "ocloc would miss these libraries: $missing"
  printf '%s\n' "${done_list[@]}" | while read -r p; do
    dpkg-deb -f "$(ls "$dl/${p}_"*.deb)" Package Version | paste -sd' '
  done > "$new/PACKAGES"
  rm -rf "$intel"
  mv "$new" "$intel"
  chmod 755 "$intel"
  rm -rf "$dl"
  trap - EXIT
}

write_wrapper() {
  local libdir rel
  libdir="$(dirname "$(find "$intel" -name libocloc.so -print -quit)")"
  rel="${libdir#"$tools"/}"
  mkdir -p "$tools/bin"
  cat > "$wrapper.tmp" <<EOF
#!/bin/sh
# ocloc from the unpacked (not installed) intel-opencl-icd; written by
# scripts/vendor-tools.sh. LD_LIBRARY_PATH is set for ocloc alone.
tools="\$(cd "\$(dirname "\$0")/.." && pwd)"
LD_LIBRARY_PATH="\$tools/$rel\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$tools/intel/usr/bin/ocloc" "\$@"
EOF
  chmod 755 "$wrapper.tmp"
  mv "$wrapper.tmp" "$wrapper"
}

if [ -f "$intel/PACKAGES" ] && [ -x "$wrapper" ] && [ -z "$(intel_missing_libs "$intel")" ]; then
  :  # set up before, and every library still resolves
else
  say "setting up ocloc in $intel"
  intel_setup
  write_wrapper
  "$wrapper" --help > /dev/null 2>&1 || die "$wrapper does not run"
fi

# ---------------------------------------------------------------- AMD
apt_install clang-15 rocm-device-libs
amd_clang="$(command -v clang-15)" || die "no clang-15 after installing it"
ocml="$(dpkg -L rocm-device-libs | grep '/ocml\.bc$' | head -n 1)"
[ -n "$ocml" ] || die "rocm-device-libs has no ocml.bc"
bitcode="$(dirname "$ocml")"
amd_stamp="$tools/amd.ok"
if [ "$(cat "$amd_stamp" 2> /dev/null)" != "$amd_clang $bitcode" ]; then
  # one tiny kernel through the device libraries: the bitcode must be readable
  probe="$(mktemp -d)"
  printf '__kernel void probe(__global float *x) { x[get_global_id(0)] = exp(x[0]); }\n' > "$probe/p.cl"
  if ! "$amd_clang" -x cl -cl-std=CL1.2 -Xclang -finclude-default-header \
      -target amdgcn-amd-amdhsa -mcpu=gfx940 --rocm-device-lib-path="$bitcode" \
      -O3 -c -o "$probe/p.o" "$probe/p.cl" 2> "$probe/log"; then
    cat "$probe/log" >&2
    rm -rf "$probe"
    die "$amd_clang cannot compile with the device libraries in $bitcode"
  fi
  rm -rf "$probe"
  echo "$amd_clang $bitcode" > "$amd_stamp"
fi

# ---------------------------------------------------------------- paths
paths="$(printf 'FCL_OCLOC=%q\nFCL_AMD_CLANG=%q\nFCL_ROCM_DEVICE_LIBS=%q\n' \
  "$wrapper" "$amd_clang" "$bitcode")"
[ "$(cat "$tools/paths.sh" 2> /dev/null)" = "$paths" ] || echo "$paths" > "$tools/paths.sh"
echo "$paths"
