#!/usr/bin/env bash
# Install what a fresh Debian machine lacks, then the project into .venv/.
# Safe to re-run: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
# mnexec (Debian's mininet) starts the emulated fabric's hosts; ifconfig
# (net-tools, which mininet pulls in) is how Mininet configures them;
# tcpdump writes the per-port captures of `cassini fabric up --pcap DIR`.
# gcc and Python's headers build the software target's compiled packet path.
for tool in ip:iproute2 ethtool:ethtool ping:iputils-ping mnexec:mininet ifconfig:net-tools tcpdump:tcpdump gcc:gcc; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    >/dev/null 2>&1 || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${need_apt[@]}"
    else
        echo "setup: missing system packages: ${need_apt[*]} (install them as root)" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
echo "setup: ready (.venv/bin/cassini)"
