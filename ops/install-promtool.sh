#!/usr/bin/env bash
# Install promtool (Prometheus rule checker and rule unit-test runner) when it is missing.
#
# promtool ships in Debian's `prometheus` package. Installing that package would also install
# the Prometheus server (96 MB) with a service and a system user, and pull a dozen web
# libraries; we only need one binary. So: download the .deb with apt (Debian's own registry,
# signature-checked through the package lists) and extract /usr/bin/promtool from it.
# About 20 MB downloaded, ~10 s. Destination: $PROMTOOL_DIR (default /usr/local/bin).
set -euo pipefail

dest_dir="${PROMTOOL_DIR:-/usr/local/bin}"
if command -v promtool >/dev/null 2>&1; then
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download prometheus >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get download prometheus >/dev/null
fi
dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool
install -m 0755 usr/bin/promtool "$dest_dir/promtool"
echo "installed $("$dest_dir/promtool" --version 2>&1 | head -n 1) into $dest_dir"
