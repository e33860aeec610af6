#!/usr/bin/env bash
# scripts/shared_venv.sh, the venv that every clone's set-up shares (scripts/setup.sh, step 2), run for real in
# a temporary cache: a fresh clone's .venv becomes a link to a venv named by set-up's key; another pip spec
# gives another key; a clone linked to an old key's venv is linked to its own; venvs no set-up used for
# RANZCR_VENV_PRUNE_DAYS days are removed, but not one used lately, not one whose lock a set-up holds, not a
# folder that is not named by a key, and none with 0 days; set-up's call leaves a .venv folder or a link
# elsewhere alone, and with Torch_DIR set or offline keeps the linked venv and marks it used; a second set-up
# waits while the first holds the lock; a bad day count is one error line.
# Exit 0: passed; 1: failed; 77: skipped (no python3 with venv, or no flock).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v flock > /dev/null 2>&1 || { echo "skipped: no flock"; exit 77; }
python3 -c 'import venv, ensurepip' > /dev/null 2>&1 || { echo "skipped: no python3 venv"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/checks.sh"
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
hold_lock() {  # hold_lock FILE SECONDS: one process (no child keeping the lock) holds FILE's lock; its pid in $holder
  rm -f "$tmp/held"
  (exec 8>> "$1" && flock 8 && touch "$tmp/held" && exec sleep "$2") &
  holder=$!
  local i
  for i in $(seq 100); do [ -e "$tmp/held" ] && return 0; sleep 0.1; done
  fail "the lock holder did not take $1 within 10 s"
}
# The caller's settings must not steer the functions (a pip spec changes the key).
unset RANZCR_VENV_PRUNE_DAYS RANZCR_OFFLINE Torch_DIR XDG_CACHE_HOME
while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\([A-Z_]*PIP_SPECS\{0,1\}\)=.*/\1/p')
mkdir -p "$tmp/clone/scripts"
cp "$repo/scripts/setup.sh" "$tmp/clone/scripts/setup.sh"  # the key hashes set-up's own steps 2 and 2b

# run_fn FUNCTION ENV...: FUNCTION of shared_venv.sh in a child shell (its lock goes with it), as set-up runs
# it; output to $tmp/out. link ENV...: link_shared_venv; at_setup ENV...: shared_venv_at_setup (set-up's call).
run_fn() {
  local fn=$1
  shift
  env "$@" RANZCR_VENV_CACHE="$tmp/venvs" ROOT="$tmp/clone" bash -c '
    set -euo pipefail
    say() { echo "setup: $*" >&2; }
    die() { echo "error: $*" >&2; exit 1; }
    source "'"$repo"'/scripts/shared_venv.sh"
    '"$fn" > "$tmp/out" 2>&1
}
link() { run_fn link_shared_venv "$@"; }
at_setup() { run_fn shared_venv_at_setup "$@"; }
used_lately() { [ -n "$(find "$1" -mmin -10)" ]; }  # used_lately LOCK: a set-up marked it used minutes ago
old_venv() {  # old_venv KEY DAYS: a venv that a set-up last used DAYS days ago
  mkdir -p "$tmp/venvs/$1/bin"
  touch -d "$2 days ago" "$tmp/venvs/$1.lock"
}

# A fresh clone: .venv is a link to VENV_CACHE/<16 hex digits>, a venv with its python.
link || fail "link_shared_venv in a fresh clone: $(cat "$tmp/out")"
key=$(basename "$(readlink "$tmp/clone/.venv")")
[[ "$key" =~ ^[0-9a-f]{16}$ ]] && [ "$(dirname "$(readlink "$tmp/clone/.venv")")" = "$tmp/venvs" ] ||
  fail ".venv links to '$(readlink "$tmp/clone/.venv")', not to $tmp/venvs/<key>"
[ -x "$tmp/clone/.venv/bin/python" ] || fail "no python in the shared venv"
check "says where .venv links" "$tmp/out" "^setup: \.venv: a link to the shared venv $tmp/venvs/$key$"
# The same set-up again: the same venv, nothing said, nothing made.
link || fail "a second link_shared_venv: $(cat "$tmp/out")"
[ "$(readlink "$tmp/clone/.venv")" = "$tmp/venvs/$key" ] || fail "a second set-up changed the link"
[ ! -s "$tmp/out" ] || fail "a second set-up said: $(cat "$tmp/out")"

# Another pip spec: another key, another venv; the first one stays (used just now).
link TIMM_PIP_SPEC=timm==0.0.1 || fail "link with another spec: $(cat "$tmp/out")"
key2=$(basename "$(readlink "$tmp/clone/.venv")")
[ "$key2" != "$key" ] && [ -x "$tmp/venvs/$key2/bin/python" ] || fail "TIMM_PIP_SPEC gave the same key $key"
[ -d "$tmp/venvs/$key" ] || fail "the venv used a moment ago was removed"

# Set-up's call leaves a .venv alone that is a folder of the clone or links elsewhere.
rm "$tmp/clone/.venv" && mkdir -p "$tmp/clone/.venv" "$tmp/elsewhere"
at_setup || fail "shared_venv_at_setup with a .venv folder: $(cat "$tmp/out")"
[ -d "$tmp/clone/.venv" ] && [ ! -L "$tmp/clone/.venv" ] && [ ! -s "$tmp/out" ] || fail "a .venv folder was touched"
rm -r "$tmp/clone/.venv" && ln -s "$tmp/elsewhere" "$tmp/clone/.venv"
at_setup || fail "shared_venv_at_setup with a .venv linking elsewhere: $(cat "$tmp/out")"
[ "$(readlink "$tmp/clone/.venv")" = "$tmp/elsewhere" ] || fail "a .venv linking elsewhere was relinked"
# With Torch_DIR set, or offline, a .venv linked to an old key's venv keeps it, marked used (not pruned).
old_venv eeeeeeeeeeeeeeee 40
ln -sfn "$tmp/venvs/eeeeeeeeeeeeeeee" "$tmp/clone/.venv"
at_setup Torch_DIR=/nowhere || fail "shared_venv_at_setup with Torch_DIR: $(cat "$tmp/out")"
[ "$(readlink "$tmp/clone/.venv")" = "$tmp/venvs/eeeeeeeeeeeeeeee" ] || fail "Torch_DIR set, but .venv was relinked"
used_lately "$tmp/venvs/eeeeeeeeeeeeeeee.lock" || fail "Torch_DIR set: the linked venv was not marked used"
touch -d "40 days ago" "$tmp/venvs/eeeeeeeeeeeeeeee.lock"
at_setup RANZCR_OFFLINE=1 || fail "shared_venv_at_setup offline: $(cat "$tmp/out")"
[ "$(readlink "$tmp/clone/.venv")" = "$tmp/venvs/eeeeeeeeeeeeeeee" ] || fail "offline, but .venv was relinked"
used_lately "$tmp/venvs/eeeeeeeeeeeeeeee.lock" || fail "offline: the linked venv was not marked used"
[ -d "$tmp/venvs/eeeeeeeeeeeeeeee" ] || fail "the venv in use was removed"

# A clone linked to an old key's venv is linked to its own; old venvs are pruned by their last use.
old_venv aaaaaaaaaaaaaaaa 40  # unused for 40 days: removed
old_venv bbbbbbbbbbbbbbbb 5   # used 5 days ago: kept
old_venv cccccccccccccccc 40  # unused for 40 days, but a set-up holds its lock: kept
old_venv not-a-venv 40        # not named by a key (another tool's folder in RANZCR_VENV_CACHE): kept
ln -sfn "$tmp/venvs/aaaaaaaaaaaaaaaa" "$tmp/clone/.venv"
hold_lock "$tmp/venvs/cccccccccccccccc.lock" 30
at_setup || fail "relink from an old key: $(cat "$tmp/out")"
[ "$(readlink "$tmp/clone/.venv")" = "$tmp/venvs/$key" ] ||
  fail ".venv still links to $(readlink "$tmp/clone/.venv"), not to set-up's key $key"
[ ! -e "$tmp/venvs/aaaaaaaaaaaaaaaa" ] || fail "the venv unused for 40 days is still there"
check "says which venv it removed" "$tmp/out" "removed the shared venv $tmp/venvs/aaaaaaaaaaaaaaaa \(no set-up used it for 30 days"
[ -d "$tmp/venvs/bbbbbbbbbbbbbbbb" ] || fail "the venv used 5 days ago was removed"
[ -d "$tmp/venvs/cccccccccccccccc" ] || fail "the venv whose lock a set-up holds was removed"
[ -d "$tmp/venvs/not-a-venv" ] || fail "a folder not named by a key was removed"
kill "$holder" 2> /dev/null
wait "$holder" 2> /dev/null
# Its lock free now, it goes at the next set-up; with RANZCR_VENV_PRUNE_DAYS=0 none goes.
link RANZCR_VENV_PRUNE_DAYS=0 || fail "link with RANZCR_VENV_PRUNE_DAYS=0: $(cat "$tmp/out")"
[ -d "$tmp/venvs/cccccccccccccccc" ] || fail "RANZCR_VENV_PRUNE_DAYS=0 removed a venv"
link || fail "link after the lock was freed: $(cat "$tmp/out")"
[ ! -e "$tmp/venvs/cccccccccccccccc" ] || fail "the venv unused for 40 days, its lock free, is still there"
# RANZCR_VENV_PRUNE_DAYS=3 takes the one used 5 days ago.
link RANZCR_VENV_PRUNE_DAYS=3 || fail "link with RANZCR_VENV_PRUNE_DAYS=3: $(cat "$tmp/out")"
[ ! -e "$tmp/venvs/bbbbbbbbbbbbbbbb" ] || fail "RANZCR_VENV_PRUNE_DAYS=3 kept the venv used 5 days ago"
[ -d "$tmp/venvs/$key" ] && [ -d "$tmp/venvs/$key2" ] || fail "RANZCR_VENV_PRUNE_DAYS=3 removed a venv used today"

# A bad day count: one line, exit 1.
if link RANZCR_VENV_PRUNE_DAYS=soon; then fail "RANZCR_VENV_PRUNE_DAYS=soon was taken"; fi
check "a bad day count says what was expected" "$tmp/out" "^error: RANZCR_VENV_PRUNE_DAYS=soon: expected a whole number of days"

# While one set-up holds the lock (filling the venv), a second waits for it.
hold_lock "$tmp/venvs/$key.lock" 3
start=$(date +%s)
link || fail "link while another set-up held the lock: $(cat "$tmp/out")"
waited=$(($(date +%s) - start))
wait "$holder"
[ "$waited" -ge 2 ] || fail "the second set-up did not wait for the lock (${waited} s)"

[ "$failures" -eq 0 ] && echo "passed" && exit 0
echo "$failures failed"
exit 1
