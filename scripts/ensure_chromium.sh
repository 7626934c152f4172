#!/usr/bin/env bash
# The browser test drives Debian's Chromium (no browser is ever downloaded by a test tool).
# Install it when it is missing and this machine can: root with apt. Otherwise say how.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Chromium for the browser test (apt-get install chromium)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "The browser test needs Chromium: install it (e.g. sudo apt-get install chromium), then run make test again." >&2
fi
