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
# Older .venvs had p4runtime-shell (and protobuf 3.20) in them: the package no
# longer depends on it, and its `p4` stubs would shadow nothing but confuse.
if .venv/bin/python -m pip show -q p4runtime-shell >/dev/null 2>&1; then
    .venv/bin/python -m pip uninstall -y -q p4runtime-shell p4runtime
fi
# The P4Runtime stubs, generated from the .proto files of a pinned finsy wheel.
.venv/bin/python scripts/gen_protos.py

# The reference clients the tests run against the switch over gRPC, each in an
# environment of its own with its pins intact (p4runtime-shell 0.0.6 pins
# protobuf<3.21; finsy pins its own protobuf and grpcio).
client_env() {  # DIR REQUIREMENT: made once, remade when the requirement changes
    local dir=$1 requirement=$2
    if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.requirement" 2>/dev/null)" = "$requirement" ]; then
        return
    fi
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q "$requirement"
    echo "$requirement" >"$dir/.requirement"
}
client_env .venv-p4rt-shell "p4runtime-shell==0.0.6"
client_env .venv-finsy "finsy==0.30.0"
echo "setup: ready (.venv/bin/cassini)"
