#!/usr/bin/env bash
# The real-ZooKeeper tests need Debian's zookeeper package (zkServer.sh). Install it when missing;
# never fail the build: without it those tests are skipped with one line saying why.
set -uo pipefail
if [ -x /usr/share/zookeeper/bin/zkServer.sh ]; then
    exit 0
fi
echo "ensure-zookeeper: installing the zookeeper package from the distribution's packages" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
        echo "ensure-zookeeper: not root and no passwordless sudo; the ZooKeeper tests will be skipped" >&2
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq zookeeper >/dev/null; }; then
    echo "ensure-zookeeper: could not install zookeeper; the ZooKeeper tests will be skipped" >&2
fi
exit 0
