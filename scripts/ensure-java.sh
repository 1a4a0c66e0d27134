#!/usr/bin/env bash
# PySpark needs a JDK 17+. Install Debian's when `java` is missing (root, or sudo without a password).
set -euo pipefail
if command -v java >/dev/null 2>&1; then
    exit 0
fi
echo "ensure-java: no java on PATH; installing openjdk-17-jre-headless from the distribution's packages" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "ensure-java: not root and no passwordless sudo; install a JDK 17 yourself (e.g. apt-get install openjdk-17-jre-headless)" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
java -version
