#!/usr/bin/env bash
# Make sure tmux exists for the tests of `clustersync top` in a terminal of a given size (each
# test starts its own tmux server on a private socket). Installs it with apt-get where we are
# root and apt-get exists; otherwise says what to run.
set -euo pipefail
if command -v tmux >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "tmux not found: installing it with apt-get" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux) >&2
  command -v tmux >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
tmux is needed by the tests of `clustersync top` and could not be installed automatically.
Install it with
  sudo apt-get install tmux      (Debian/Ubuntu)
  brew install tmux              (macOS)
Without it, those tests are skipped (and fail under CI=true).
MSG
[ "${CI:-}" = "true" ] && exit 1 || exit 0
