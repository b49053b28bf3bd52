#!/usr/bin/env bash
# Compiles one assembled OpenCL program with a GPU vendor's real compiler and
# prints, per kernel, what that compiler made of it: registers, spills,
# scratch and local memory. No such GPU is needed; the compilers come from
# scripts/vendor-tools.sh. What PoCL and clang's syntax check cannot tell: that
# a planned kernel spills on the hardware it was planned for.
#
# Usage: scripts/vendor-compile.sh [--header] TARGET FILE.cl [OPTIONS...]
#        scripts/vendor-compile.sh --header        (the header line alone)
#   FILE.cl  an assembled program, as the library builds it (flashcl-info
#            --program-text FILE.cl prints it: the shared texts, the prelude
#            if any and the kernel file)
#   OPTIONS  the build options (-DNAME=VALUE ..., -cl-std=CL1.2)
#   TARGET   dg2      Intel Arc A770 (Xe-HPG), ocloc -device dg2
#            pvc      Intel Data Center GPU Max 1550 (Xe-HPC), ocloc -device pvc
#            gfx940   AMD Instinct MI300X (CDNA 3), clang-15 -mcpu=gfx940
#            gfx1030  AMD RDNA 2, standing in for the RX 7900 XTX (RDNA 3):
#                     Debian 12's device libraries have no gfx11 bitcode
#            gfx1100  the RX 7900 XTX itself, for experiments only: it needs
#                     FCL_ROCM_DEVICE_LIBS with an oclc_isa_version_1100.bc,
#                     and clang-15 allocates it at most 128 VGPRs a lane
#                     (FCL_AMD_CLANG=clang-19 does not; docs/design.md,
#                     "RDNA 3")
#
# Output: one tab-separated line per kernel of the program (with a header line
# first under --header):
#   target kernel simd regs agprs sgprs spill_bytes scratch_bytes local_bytes occupancy
#   simd           Intel: the SIMD width compiled; AMD: the wavefront size
#   regs           Intel: GRFs of the register mode (128, or 256 in large-GRF
#                  mode); AMD: architectural VGPRs
#   agprs, sgprs   AMD's accumulation VGPRs (0 where the chip has none) and
#                  SGPRs; - for Intel
#   spill_bytes    Intel: execution_env.spill_size of the binary's .ze_info
#                  when it has one (newer IGC); else, as with Debian 12's IGC
#                  1.0.12504, from ocloc's warning "allocated R regs and spilled
#                  around N", N being spilled GRFs (IGC rounds its spill bytes
#                  up to whole GRFs), times the GRF size: 32 bytes on dg2, 64 on
#                  pvc; 0 when there is no warning. Bytes per hardware thread.
#                  AMD: (VGPR spills + SGPR spills) x 4, bytes per lane, from
#                  the kernel-resource-usage remarks. An SGPR spill usually
#                  goes to a lane of a VGPR (v_writelane), not to memory.
#   scratch_bytes  Intel: the per-thread memory buffers of .ze_info, per
#                  hardware thread: scratch (spill_fill_space, private_space,
#                  single_space) plus private memory on global buffers
#                  (per work-item, times simd); AMD: ScratchSize, bytes per
#                  lane (spills and private arrays kept in memory)
#   local_bytes    Intel: slm_size; AMD: LDS Size
#   occupancy      AMD: waves per SIMD (the remark's Occupancy); - for Intel
#
# Exits non-zero, with the compiler's log on stderr, when the compile fails.
# Environment:
#   FCL_INTEL_OPTIONS     appended to Intel's build options, for experiments
#                         such as -cl-intel-256-GRF-per-thread
#   FLASHCL_VENDOR_TOOLS  the tools folder (default build/vendor-tools); its
#                         paths.sh (written by vendor-tools.sh) gives defaults to
#   FCL_OCLOC, FCL_AMD_CLANG, FCL_ROCM_DEVICE_LIBS  ocloc, clang-15 and the
#                         device libraries' bitcode folder, when set
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}
die() { echo "vendor-compile: $*" >&2; exit 1; }

header=0
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  --header) header=1; shift ;;
esac
if [ "$header" -eq 1 ]; then
  printf 'target\tkernel\tsimd\tregs\tagprs\tsgprs\tspill_bytes\tscratch_bytes\tlocal_bytes\toccupancy\n'
  [ $# -eq 0 ] && exit 0
fi
[ $# -ge 2 ] || { echo "usage: $0 [--header] TARGET FILE.cl [OPTIONS...] (see --help)" >&2; exit 2; }
target="$1" file="$2"
shift 2
[ -r "$file" ] || die "cannot read $file"

repo="$(cd "$(dirname "$0")/.." && pwd)"
tools="${FLASHCL_VENDOR_TOOLS:-$repo/build/vendor-tools}"
ocloc="${FCL_OCLOC:-}" amd_clang="${FCL_AMD_CLANG:-}" bitcode="${FCL_ROCM_DEVICE_LIBS:-}"
if [ -r "$tools/paths.sh" ]; then
  # shellcheck disable=SC1091
  defaults="$(. "$tools/paths.sh" && printf '%s\n%s\n%s\n' "${FCL_OCLOC:-}" "${FCL_AMD_CLANG:-}" \
    "${FCL_ROCM_DEVICE_LIBS:-}")"
  { read -r d_ocloc; read -r d_clang; read -r d_bitcode; } <<< "$defaults"
  ocloc="${ocloc:-$d_ocloc}" amd_clang="${amd_clang:-$d_clang}" bitcode="${bitcode:-$d_bitcode}"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Per-kernel lines from a zebin's .ze_info and ocloc's log: binary, log,
# target, GRF bytes.
intel_report() {
  python3 - "$@" <<'EOF'
import re, struct, sys

binary, log, target, grf_bytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def ze_info(path):
    """The text of the .ze_info section of a zebin (a 64-bit ELF)."""
    data = open(path, 'rb').read()
    if data[:4] != b'\x7fELF' or data[4] != 2:
        sys.exit('vendor-compile: %s is not a 64-bit ELF (a zebin)' % path)
    shoff, = struct.unpack_from('<Q', data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3a)
    headers = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize)
               for i in range(shnum)]
    names = headers[shstrndx][4]
    for h in headers:
        name = data[names + h[0]:data.index(b'\0', names + h[0])]
        if name == b'.ze_info':
            return data[h[4]:h[4] + h[5]].decode('utf-8', 'replace')
    sys.exit('vendor-compile: no .ze_info section in %s' % path)

def kernels(text):
    """Per kernel: name, execution_env (a dict), per_thread_memory_buffers
    (a list of dicts). Only the few shapes of the YAML that IGC writes."""
    out, kernel, section, item, in_kernels = [], None, None, None, False
    for line in text.splitlines():
        if not line.strip() or line.startswith(('---', '...')):
            continue
        indent = len(line) - len(line.lstrip(' '))
        body = line.strip()
        if indent == 0:  # a top-level key: kernels, or one after them
            kernel = None
            in_kernels = body == 'kernels:'
            continue
        if not in_kernels:
            continue
        if indent == 2 and body.startswith('- '):
            key, _, value = body[2:].partition(':')
            kernel = {'name': value.strip(), 'env': {}, 'buffers': []}
            out.append(kernel)
            section = None
            continue
        if kernel is None:
            continue
        if indent == 4:
            key, _, value = body.partition(':')
            section = key if not value.strip() else None
            continue
        if section == 'execution_env' and indent == 6:
            key, _, value = body.partition(':')
            kernel['env'][key.strip()] = value.strip()
        elif section == 'per_thread_memory_buffers':
            if indent == 6 and body.startswith('- '):
                item = {}
                kernel['buffers'].append(item)
                body = body[2:]
            if item is not None and indent in (6, 8):
                key, _, value = body.partition(':')
                item[key.strip()] = value.strip()
    return out

text = ze_info(binary)
# "kernel NAME  compiled SIMD16 allocated 128 regs and spilled around 330"
# (IGC 1.0.12504); newer IGC: "in kernel 'NAME': compiled SIMD16 ..."
spilled = {}
for line in open(log, errors='replace'):
    m = re.search(r"kernel (?:'([^']+)':|(\S+))\s+compiled SIMD(\d+) allocated (\d+) regs"
                  r" and spilled around (\d+)", line)
    if m:
        spilled[m.group(1) or m.group(2)] = int(m.group(5))

def number(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default

for k in kernels(text):
    if k['name'] == 'Intel_Symbol_Table_Void_Program':
        continue  # IGC's dummy kernel for a program with global symbols
    env = k['env']
    simd = number(env.get('simd_size'))
    if 'spill_size' in env:
        spill = number(env['spill_size'])
    else:
        spill = spilled.get(k['name'], 0) * grf_bytes
    scratch = 0
    for b in k['buffers']:
        size = number(b.get('size'))
        if b.get('type') == 'global' and b.get('is_simt_thread') == 'true':
            size *= simd
        scratch += size
    print('\t'.join(map(str, [target, k['name'], simd, number(env.get('grf_count')), '-', '-',
                              spill, scratch, number(env.get('slm_size')), '-'])))
EOF
}

# Per-kernel lines from clang's kernel-resource-usage remarks and the
# assembly's metadata (which functions are kernels, their wavefront size):
# assembly, log, target.
amd_report() {
  python3 - "$@" <<'EOF'
import re, sys

asm, log, target = sys.argv[1:4]

# The kernels and their wavefront sizes, from the .amdgpu_metadata block: a
# kernel's own keys are at indent 4 ("  - .key:" opens the next kernel).
waves, order, current, inside = {}, [], {}, False
for line in open(asm, errors='replace'):
    if '.amdgpu_metadata' in line:
        inside = '.end_amdgpu_metadata' not in line
        continue
    if not inside:
        continue
    m = re.match(r'^(  - |    )\.([a-z_]+):\s*(.*)$', line)
    if not m:
        continue
    if m.group(1) == '  - ':
        current = {}
    current[m.group(2)] = m.group(3).strip()
    if 'name' in current and 'wavefront_size' in current and current['name'] not in waves:
        waves[current['name']] = int(current['wavefront_size'])
        order.append(current['name'])

# "remark: Function Name: flash_fwd", then "remark:     VGPRs: 256" ...
usage, name = {}, None
for line in open(log, errors='replace'):
    m = re.search(r'remark: +([^:\[]+?)(?: \[[^\]]*\])?: (\S+) \[-Rpass-analysis=kernel-resource-usage\]', line)
    if not m:
        continue
    key, value = m.group(1).strip(), m.group(2)
    if key == 'Function Name':
        name = value
        usage[name] = {}
    elif name is not None:
        usage[name][key] = int(value) if value.isdigit() else value  # newer clangs: "False"

if not order:
    sys.exit('vendor-compile: no kernel in the program (no .amdgpu_metadata kernels)')
for k in order:
    u = usage.get(k)
    if u is None:
        sys.exit('vendor-compile: no kernel-resource-usage remarks for kernel %s' % k)
    spill = 4 * (u.get('VGPRs Spill', 0) + u.get('SGPRs Spill', 0))
    print('\t'.join(map(str, [target, k, waves[k], u['VGPRs'], u.get('AGPRs', 0), u['SGPRs'],
                              spill, u.get('ScratchSize', 0), u.get('LDS Size', 0),
                              u.get('Occupancy', '-')])))
EOF
}

case "$target" in
  dg2 | pvc)
    [ -n "$ocloc" ] || ocloc="$tools/bin/ocloc"
    [ -x "$ocloc" ] || die "no ocloc at $ocloc: run scripts/vendor-tools.sh"
    grf_bytes=32
    [ "$target" = pvc ] && grf_bytes=64
    options="$*${FCL_INTEL_OPTIONS:+ $FCL_INTEL_OPTIONS}"
    # zebin (ELF with .ze_info) rather than the legacy patch-token format,
    # which this ocloc still writes by default for dg2
    if ! "$ocloc" compile -file "$file" -device "$target" --format zebin -exclude_ir \
        -options "$options" -out_dir "$tmp/out" -output program -output_no_suffix \
        > "$tmp/log" 2>&1; then
      cat "$tmp/log" >&2
      die "ocloc failed for $target"
    fi
    binary="$(find "$tmp/out" -type f ! -name '*.spv' ! -name '*.gen' -print -quit)"
    if [ -z "$binary" ] || ! grep -q 'Build succeeded' "$tmp/log"; then
      cat "$tmp/log" >&2
      die "ocloc wrote no binary for $target"
    fi
    intel_report "$binary" "$tmp/log" "$target" "$grf_bytes"
    ;;
  gfx940 | gfx1030 | gfx1100)
    [ -n "$amd_clang" ] || amd_clang="$(command -v clang-15 || true)"
    [ -n "$amd_clang" ] || die "no clang-15: run scripts/vendor-tools.sh"
    if [ -z "$bitcode" ]; then
      ocml="$(dpkg -L rocm-device-libs 2> /dev/null | grep '/ocml\.bc$' | head -n 1 || true)"
      [ -n "$ocml" ] || die "no rocm-device-libs: run scripts/vendor-tools.sh"
      bitcode="$(dirname "$ocml")"
    fi
    if ! "$amd_clang" -x cl -Xclang -finclude-default-header -target amdgcn-amd-amdhsa \
        -mcpu="$target" --rocm-device-lib-path="$bitcode" -O3 \
        -Rpass-analysis=kernel-resource-usage "$@" -S -o "$tmp/program.s" "$file" \
        > "$tmp/log" 2>&1; then
      cat "$tmp/log" >&2
      die "clang failed for $target"
    fi
    amd_report "$tmp/program.s" "$tmp/log" "$target"
    ;;
  *) die "unknown target '$target': dg2, pvc, gfx940, gfx1030 or gfx1100" ;;
esac
