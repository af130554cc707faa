#!/usr/bin/env bash
# Make sure Debian's chromium and chromium-driver exist for the dashboard's browser test
# (tests/test_dashboard_browser.py drives /usr/bin/chromium through /usr/bin/chromedriver; no
# browser or driver is ever downloaded). Installs them with apt-get where we are root and
# apt-get exists; otherwise says what to run.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium or chromedriver not found: installing them with apt-get" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >&2
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
chromium and chromedriver are needed by the dashboard's browser test and could not be
installed automatically. Install them with
  sudo apt-get install chromium chromium-driver      (Debian/Ubuntu)
Without them, that test is skipped (and fails under CI=true).
MSG
[ "${CI:-}" = "true" ] && exit 1 || exit 0
