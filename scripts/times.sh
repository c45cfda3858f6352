# Sourced by .ci/run and scripts/test: `timed NAME CMD...` runs CMD and, when ABTEST_TIMINGS
# names a file, writes when NAME began and how long it took there (scripts/ci-times prints
# the table). The command's exit status is returned unchanged.
timed() {
  local name=$1 t0=$SECONDS rc=0
  shift
  if [[ -n ${ABTEST_TIMINGS:-} ]]; then printf 'start\t%s\n' "$name" >>"$ABTEST_TIMINGS"; fi
  "$@" || rc=$?
  if [[ -n ${ABTEST_TIMINGS:-} ]]; then
    printf 'phase\t%s\t%s\n' "$name" $((SECONDS - t0)) >>"$ABTEST_TIMINGS"
  fi
  return $rc
}
