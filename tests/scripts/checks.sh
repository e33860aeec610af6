# Shared by the bench-script tests (sourced): check / check_not on a file's lines, counting failures.
failures=0
check() {  # check WHAT FILE PATTERN: FILE has a line matching the extended regex PATTERN
  if grep -qE -- "$3" "$2"; then
    echo "ok: $1"
  else
    echo "FAILED: $1: no line matching '$3' in $2:" && sed 's/^/    /' "$2"
    failures=$((failures + 1))
  fi
}
check_not() {  # check_not WHAT FILE PATTERN: no line of FILE matches PATTERN
  if grep -qE -- "$3" "$2"; then
    echo "FAILED: $1: a line matches '$3' in $2:" && sed 's/^/    /' "$2"
    failures=$((failures + 1))
  else
    echo "ok: $1"
  fi
}
