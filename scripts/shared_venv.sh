# Sourced by scripts/setup.sh (step 2) and tests/scripts/shared_venv_test.sh: the venv that every clone shares.
# Needs ROOT (the clone), say and die.
# link_shared_venv: .venv becomes a link to VENV_CACHE/<key> (RANZCR_VENV_CACHE, default ~/.cache/ranzcr/venvs),
# made there once by set-up's steps 2 and 2b. The key (16 hex digits) hashes the text of both steps (the
# packages and their pins), the *_PIP_SPEC(S) variables set, and the python, so another set of packages gets a
# venv of its own. A fresh clone (CI's) then installs nothing that an earlier clone installed: 3.5 minutes of
# pip here, before. RANZCR_VENV_CACHE=0: a venv of the clone's own. The lock (held until step 2b is done)
# makes a second clone's set-up wait while another fills the same venv; its file's time says when a set-up
# last used the venv. A clone whose .venv links to another key's venv (its set-up changed since) is linked to
# its own key, never installed into a venv that other clones share under the old key.
VENV_CACHE=${RANZCR_VENV_CACHE:-${XDG_CACHE_HOME:-${HOME:-}/.cache}/ranzcr/venvs}
link_shared_venv() {
  local key dir
  [ -n "${RANZCR_VENV_CACHE:-}${XDG_CACHE_HOME:-}${HOME:-}" ] ||
    die "no HOME, XDG_CACHE_HOME or RANZCR_VENV_CACHE to keep the shared venvs in (RANZCR_VENV_CACHE=0: a venv in the clone)"
  key=$({ sed -n '/^# 2\. LibTorch/,/^# 3\. Configure/p' "$ROOT/scripts/setup.sh"
          env | grep -E '^[A-Z_]*PIP_SPECS?=' | sort
          python3 -VV; } | sha256sum | cut -c1-16)
  dir=$VENV_CACHE/$key
  mkdir -p "$VENV_CACHE"
  lock_shared_venv "$dir"
  [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
  if [ "$(readlink "$ROOT/.venv" 2>/dev/null)" != "$dir" ]; then
    ln -sfn "$dir" "$ROOT/.venv"
    say ".venv: a link to the shared venv $dir"
  fi
  prune_shared_venvs "$key"
}
# lock_shared_venv DIR: takes DIR's lock on fd 9 (waiting for a set-up that holds it; set-up lets it go after
# step 2b) and marks DIR used now.
lock_shared_venv() {
  exec 9>"$1.lock"
  flock 9
  touch "$1.lock"
}
# shared_venv_at_setup: set-up's first step with a .venv that links into VENV_CACHE. With no Torch_DIR and pip
# allowed, .venv follows set-up's key (link_shared_venv); else the venv it links to stays, locked and marked
# used, since step 2b may still install into it and pruning must not take it. Any other .venv: nothing.
shared_venv_at_setup() {
  [ -L "$ROOT/.venv" ] && [ "${RANZCR_VENV_CACHE:-}" != 0 ] &&
    [ "$(dirname "$(readlink "$ROOT/.venv")")" = "$VENV_CACHE" ] || return 0
  if [ -z "${Torch_DIR:-}" ] && [ "${RANZCR_OFFLINE:-0}" != 1 ]; then
    link_shared_venv
  else
    lock_shared_venv "$(readlink "$ROOT/.venv")"
  fi
}
# prune_shared_venvs KEY: removes the shared venvs (2.4 GB each; folders named by a key) other than KEY's that no
# set-up has used for RANZCR_VENV_PRUNE_DAYS days (default 30; 0: none is removed) and whose lock is free at
# once (no set-up is filling or using it); the age is read again under the lock. A clone still linked to one
# gets it back, made again, at its next set-up.
prune_shared_venvs() {
  local days=${RANZCR_VENV_PRUNE_DAYS:-30} lock old name
  case $days in
    '' | *[!0-9]*) die "RANZCR_VENV_PRUNE_DAYS=$days: expected a whole number of days (0: remove none)" ;;
    0) return 0 ;;
  esac
  while IFS= read -r lock; do
    old=${lock%.lock}
    name=${old##*/}
    [[ "$name" =~ ^[0-9a-f]{16}$ ]] && [ "$name" != "$1" ] && [ -d "$old" ] || continue
    # The lock file stays (empty): a set-up waiting on it then holds the one lock a later set-up takes too.
    if flock -n "$lock" bash -c '[ -n "$(find "$1" -mtime +"$2")" ] && rm -rf -- "$3"' _ "$lock" "$((days - 1))" "$old" &&
      [ ! -e "$old" ]; then
      say "removed the shared venv $old (no set-up used it for $days days; RANZCR_VENV_PRUNE_DAYS)"
    fi
  done < <(find "$VENV_CACHE" -maxdepth 1 -name '*.lock' -mtime +"$((days - 1))" 2>/dev/null)
}
