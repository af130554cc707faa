#!/usr/bin/env bash
# Make sure a redis-server binary exists for the tests (they start their own on free ports).
# Installs it with apt-get where we are root and apt-get exists; otherwise says what to run.
set -euo pipefail
if command -v "${REDIS_SERVER_BIN:-redis-server}" >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing it with apt-get" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2
  command -v redis-server >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
redis-server is needed by the tests and could not be installed automatically. Install it with
  sudo apt-get install redis-server      (Debian/Ubuntu)
  brew install redis                     (macOS)
or set REDIS_SERVER_BIN=/path/to/redis-server. Without it, tests that need Redis are skipped
(and fail under CI=true).
MSG
[ "${CI:-}" = "true" ] && exit 1 || exit 0
