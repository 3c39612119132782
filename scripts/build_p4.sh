#!/usr/bin/env bash
# Compile the Cassini data plane.
#   cassini.p4      (v1model) with p4c            -> build/p4c-out/bmv2/
#   cassini_tna.p4  (TNA)     with bf-p4c         -> build/p4c-out/tofino/
# The sources live in p4src/ (package data of the `p4src` package, next to the
# P4Info); the compilers' outputs go under build/ and nowhere else.
# Without a compiler nothing is created (no empty folders are left).
# Usage: scripts/build_p4.sh [bmv2|tofino|all]   (default: all)
#        P4_OUT=DIR scripts/build_p4.sh ...       (write DIR/bmv2, DIR/tofino instead)
# Each compiler also writes its own P4Info; tests/controlplane/test_p4c.py compares p4c's
# with p4src/cassini.p4info.txtpb, the one the control plane loads.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/p4src"
out="${P4_OUT:-$root/build/p4c-out}"
what="${1:-all}"

case "$what" in
  bmv2|tofino|all) ;;
  *) echo "usage: $0 [bmv2|tofino|all]" >&2; exit 2 ;;
esac

built=0
missing=()

if [[ "$what" == bmv2 || "$what" == all ]]; then
  if command -v p4c >/dev/null 2>&1; then
    mkdir -p "$out/bmv2"
    p4c --target bmv2 --arch v1model --std p4-16 \
      -I "$src" -o "$out/bmv2" \
      --p4runtime-files "$out/bmv2/cassini.p4info.txtpb" \
      "$src/cassini.p4"
    echo "built $out/bmv2/cassini.json and cassini.p4info.txtpb (p4c)"
    built=1
  elif command -v p4c-bm2-ss >/dev/null 2>&1; then
    mkdir -p "$out/bmv2"
    p4c-bm2-ss --arch v1model --std p4-16 \
      -I "$src" -o "$out/bmv2/cassini.json" \
      --p4runtime-files "$out/bmv2/cassini.p4info.txtpb" \
      "$src/cassini.p4"
    echo "built $out/bmv2/cassini.json and cassini.p4info.txtpb (p4c-bm2-ss)"
    built=1
  else
    missing+=("p4c (or p4c-bm2-ss) for cassini.p4: neither Debian nor PyPI has it; on Ubuntu, p4lang's own apt repository (home:p4lang on the openSUSE Build Service, see p4c's README) has the package p4lang-p4c; on Debian build p4c from its sources (github.com/p4lang/p4c; release 1.2.4.8 builds with Debian 12's libraries)")
  fi
fi

if [[ "$what" == tofino || "$what" == all ]]; then
  if command -v bf-p4c >/dev/null 2>&1; then
    mkdir -p "$out/tofino"
    bf-p4c --target tofino --arch tna --std p4-16 \
      -I "$src" -o "$out/tofino" \
      --p4runtime-files "$out/tofino/cassini_tna.p4info.txtpb" \
      --bf-rt-schema "$out/tofino/bfrt.json" \
      "$src/cassini_tna.p4"
    echo "built $out/tofino (bf-p4c)"
    built=1
  else
    missing+=("bf-p4c for cassini_tna.p4: it ships with the Intel Tofino SDE (set SDE_INSTALL and add \$SDE_INSTALL/bin to PATH)")
  fi
fi

for m in "${missing[@]+"${missing[@]}"}"; do
  echo "build_p4: not found: $m" >&2
done
if [[ "$built" == 0 ]]; then
  echo "build_p4: no P4 compiler found; nothing was built. The control plane and the software target use p4src/cassini.p4info.txtpb and need no compiler." >&2
  exit 1
fi
