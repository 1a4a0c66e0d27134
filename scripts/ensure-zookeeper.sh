#!/usr/bin/env bash
# The real-ZooKeeper tests need Debian's zookeeper package (zkServer.sh). Install it when missing;
# never fail the build: without it those tests are skipped with one line saying why.
if [ -x /usr/share/zookeeper/bin/zkServer.sh ]; then
    exit 0
fi
"$(dirname "$0")/apt-install.sh" ensure-zookeeper zookeeper ||
    echo "ensure-zookeeper: could not install zookeeper; the ZooKeeper tests will be skipped" >&2
exit 0
