# shellcheck shell=bash
# Sourced by the script of one device call (docs/results/*/call*.sh), so
# that each script says what it times and not how: a guard that leaves the
# sections a call has no time for to the next, and one flashcl-bench run
# summarised on a line.
#
#   . tools/compare/call-lib.sh       # sets t0 and $OUT/log
#   go NAME && ...                    # runs while the call is younger than GUARD s (450),
#                                     # and NAME's first word is in ONLY where ONLY is set
#   row TAG BENCH ARGS...             # one run into $OUT/log/TAG.txt: "Ns TAG: type=ms ..."
#   pack                              # $OUT's files into one all.tgz (the transfer takes few files)
t0=$(date +%s)
mkdir -p "$OUT/log"
go() {
  if [ -n "${ONLY:-}" ]; then  # ONLY="P W": those sections alone (a second call's)
    case " $ONLY " in *" ${1%% *} "*) ;; *) return 1 ;; esac
  fi
  [ $(($(date +%s) - t0)) -lt "${GUARD:-450}" ] && return 0
  echo "skipped: $1"
  return 1
}
row() {
  local tag=$1 log=$OUT/log/$1.txt
  shift
  while [ -e "$log" ]; do log=$log.2; done
  timeout "${ROW_LIMIT:-90}" "$@" > "$log" 2>&1
  echo "$(($(date +%s) - t0))s $tag: $(awk '$1 ~ /^(fwd|bwd|fwdbwd)$/ {printf "%s=%s ", $2, $11}' "$log")"
}
pack() {
  (cd "$OUT" && tar czf /tmp/all.tgz . && find . -mindepth 1 -maxdepth 1 -exec rm -rf {} + &&
    mv /tmp/all.tgz all.tgz)
}
