#!/usr/bin/env bash
# PySpark needs a JDK 17+. Install Debian's when `java` is missing.
set -euo pipefail
if command -v java >/dev/null 2>&1; then
    exit 0
fi
if ! "$(dirname "$0")/apt-install.sh" ensure-java openjdk-17-jre-headless; then
    echo "ensure-java: install a JDK 17 yourself (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 1
fi
java -version
