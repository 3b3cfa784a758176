#!/usr/bin/env bash
# Install promtool (rule checker and rule unit-test runner) and the Prometheus server binary
# when either is missing.
#
# Both ship in Debian's `prometheus` package. Installing that package would also install a
# service, a system user and a dozen web libraries; we need two binaries: promtool for the rule
# tests (tests/unit/test_telemetry_ops.py) and the server for the end-to-end alert check
# (ops/check-alerts-live.sh). So: download the .deb with apt (Debian's own registry,
# signature-checked through the package lists) and extract /usr/bin/promtool and
# /usr/bin/prometheus from it. About 20 MB downloaded, ~10 s.
# Destination: $PROMETHEUS_BIN_DIR (default /usr/local/bin).
set -euo pipefail

dest_dir="${PROMETHEUS_BIN_DIR:-/usr/local/bin}"
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download prometheus >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get download prometheus >/dev/null
fi
dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool ./usr/bin/prometheus
for binary in promtool prometheus; do
    if ! command -v "$binary" >/dev/null 2>&1; then
        install -m 0755 "usr/bin/$binary" "$dest_dir/$binary"
        echo "installed $("$dest_dir/$binary" --version 2>&1 | head -n 1) into $dest_dir"
    fi
done
