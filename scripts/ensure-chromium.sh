#!/usr/bin/env bash
# The page tests drive a real browser: Debian's chromium and chromium-driver (/usr/bin/chromium,
# /usr/bin/chromedriver). Install them when missing; never fail the build: without them those
# tests are skipped with one line saying why.
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
"$(dirname "$0")/apt-install.sh" ensure-chromium chromium chromium-driver ||
    echo "ensure-chromium: could not install chromium and chromium-driver; the browser tests will be skipped" >&2
exit 0
