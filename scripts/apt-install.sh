#!/usr/bin/env bash
# apt-install.sh WHO PACKAGE...: install Debian packages for the build (as root, or with sudo
# without a password). Exits non-zero, with one line from WHO saying why, when it cannot.
set -uo pipefail
who=$1
shift
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "$who: not root and no passwordless sudo; cannot install $*" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "$who: installing $* from the distribution's packages" >&2
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$@" >/dev/null
