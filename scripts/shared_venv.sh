# Sourced by scripts/setup.sh (step 2) and tests/scripts/shared_venv_test.sh: the venv that every clone shares.
# Needs ROOT (the clone), say and die.
# link_shared_venv: .venv becomes a link to VENV_CACHE/<key> (RANZCR_VENV_CACHE, default ~/.cache/ranzcr/venvs),
# made there once by set-up's steps 2 and 2b. The key hashes the text of both steps (the packages and their pins),
# the *_PIP_SPEC(S) variables set, and the python, so another set of packages gets a venv of its own. A
# fresh clone (CI's) then installs nothing that an earlier clone installed: 3.5 minutes of pip here, before.
# RANZCR_VENV_CACHE=0: a venv of the clone's own. The lock (held until step 2b is done) makes a second
# clone's set-up wait while another fills the same venv; its file's time says when a set-up last used the
# venv. A clone whose .venv links to another key's venv (its set-up changed since) is linked to its own key,
# never installed into a venv that other clones share under the old key.
VENV_CACHE=${RANZCR_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ranzcr/venvs}
link_shared_venv() {
  local key dir
  key=$({ sed -n '/^# 2\. LibTorch/,/^# 3\. Configure/p' "$ROOT/scripts/setup.sh"
          env | grep -E '^[A-Z_]*PIP_SPECS?=' | sort
          python3 -VV; } | sha256sum | cut -c1-16)
  dir=$VENV_CACHE/$key
  mkdir -p "$VENV_CACHE"
  exec 9>"$dir.lock"
  flock 9
  touch "$dir.lock"
  [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
  if [ "$(readlink "$ROOT/.venv" 2>/dev/null)" != "$dir" ]; then
    ln -sfn "$dir" "$ROOT/.venv"
    say ".venv: a link to the shared venv $dir"
  fi
  prune_shared_venvs "$key"
}
# prune_shared_venvs KEY: removes the shared venvs (2.4 GB each) other than KEY's that no set-up has used for
# RANZCR_VENV_PRUNE_DAYS days (default 30; 0: none is removed) and whose lock is free at once (no set-up is
# filling or linking it). A clone still linked to one gets it back, made again, at its next set-up.
prune_shared_venvs() {
  local days=${RANZCR_VENV_PRUNE_DAYS:-30} lock old
  case $days in
    '' | *[!0-9]*) die "RANZCR_VENV_PRUNE_DAYS=$days: expected a whole number of days (0: remove none)" ;;
    0) return 0 ;;
  esac
  while IFS= read -r lock; do
    old=${lock%.lock}
    [ "$(basename "$old")" != "$1" ] && [ -d "$old" ] || continue
    # The lock file stays (empty): a set-up waiting on it then holds the one lock a later set-up takes too.
    if flock -n "$lock" rm -rf "$old"; then
      say "removed the shared venv $old (no set-up used it for $days days; RANZCR_VENV_PRUNE_DAYS)"
    fi
  done < <(find "$VENV_CACHE" -maxdepth 1 -name '*.lock' -mtime +"$((days - 1))" 2>/dev/null)
}
