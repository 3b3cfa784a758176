#!/usr/bin/env bash
# The system packages the tests need, installed when missing. `make test` runs this first, and
# so does .ci/run (CI's entry point): one list for both.
#
#   ops/install-test-deps.sh           install what is missing (as root, with apt), else fail
#   ops/install-test-deps.sh --check   only say what is missing (exit 1 if anything is)
#
# What the tests need from the machine, beyond Python and the running Postgres and Redis:
# - PostgreSQL server binaries (Debian `postgresql`) and `redis-server`: the private servers of
#   the chaos tests and the Redis Cluster tests;
# - pg_auto_failover for the newest PostgreSQL under /usr/lib/postgresql (the one the tests'
#   private servers run: awooop/demo/servers.py postgres_bindir): `pg-auto-failover-cli` and
#   `postgresql-N-auto-failover` (tests/acceptance/test_failover.py);
# - iproute2 (`ip`, `tc`: tests/integration/test_dead_peer.py);
# - Chromium (Debian `chromium`: the console's browser tests);
# - promtool and prometheus (two binaries of Debian's `prometheus` .deb, by
#   ops/install-prometheus.sh: the alert rule tests and the live alert check).
# Present ones are left alone: with nothing missing this takes milliseconds.
# Not root, or no apt-get: nothing is installed; the message names what is missing and the one
# command that installs it, and the exit status is 1, so that `make test` stops there (a test
# that needs a missing package fails rather than skips, on CI as anywhere).
# Check mode uses shell built-ins only (tests/unit/test_install_test_deps.py runs it with an
# empty PATH).
set -euo pipefail

source_path="${BASH_SOURCE[0]}"
here="."
if [[ "$source_path" == */* ]]; then
    here="${source_path%/*}"
fi
check_only=0
if [[ "${1:-}" == "--check" ]]; then
    check_only=1
fi

# The newest PostgreSQL major version with server binaries, or empty.
pg_major() {
    local newest="" dir major
    for dir in /usr/lib/postgresql/*/bin/initdb; do
        [[ -x "$dir" ]] || continue
        major="${dir#/usr/lib/postgresql/}"
        major="${major%%/*}"
        if [[ -z "$newest" || "$major" -gt "$newest" ]]; then
            newest="$major"
        fi
    done
    printf '%s' "$newest"
}

has() { command -v "$1" >/dev/null 2>&1; }

# Fills `packages` (apt packages to install), `missing` (what, for people) and `prometheus`.
survey() {
    packages=()
    missing=()
    prometheus=0
    local major
    major="$(pg_major)"
    if [[ -z "$major" ]]; then
        packages+=(postgresql)
        missing+=("PostgreSQL server binaries (postgresql)")
    fi
    if ! has redis-server; then
        packages+=(redis-server)
        missing+=("redis-server")
    fi
    if [[ -z "$major" ]]; then
        # The failover packages follow the server's version: named once it is installed.
        missing+=("pg_auto_failover (pg-auto-failover-cli, postgresql-N-auto-failover)")
    elif ! has pg_autoctl || [[ ! -e "/usr/share/postgresql/$major/extension/pgautofailover.control" ]]; then
        packages+=(pg-auto-failover-cli "postgresql-$major-auto-failover")
        missing+=("pg_auto_failover (pg-auto-failover-cli, postgresql-$major-auto-failover)")
    fi
    if ! has ip || ! has tc; then
        packages+=(iproute2)
        missing+=("iproute2 (ip, tc)")
    fi
    if ! has chromium; then
        packages+=(chromium)
        missing+=("chromium")
    fi
    if ! has promtool || ! has prometheus; then
        prometheus=1
        missing+=("promtool and prometheus (ops/install-prometheus.sh)")
    fi
}

report_missing() {
    local item
    echo "test-deps: the tests need what this machine lacks:" >&2
    for item in "${missing[@]}"; do
        echo "  - $item" >&2
    done
}

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "$@" || { apt-get update -q && apt-get install -y -q "$@"; }
}

survey
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ $check_only -eq 1 || $EUID -ne 0 ]] || ! has apt-get; then
    report_missing
    if has apt-get; then
        echo "test-deps: install them with:  sudo ops/install-test-deps.sh  (then make test)" >&2
    else
        echo "test-deps: no apt-get here: install the packages above with the system's own" \
            "package manager, then make test" >&2
    fi
    exit 1
fi

report_missing
echo "test-deps: installing them" >&2
server_missing="$([[ -z "$(pg_major)" ]] && echo 1 || echo 0)"
if [[ ${#packages[@]} -gt 0 ]]; then
    apt_install "${packages[@]}"
fi
if [[ $server_missing -eq 1 ]]; then
    survey  # the server's version, now installed, names the failover packages
    if [[ ${#packages[@]} -gt 0 ]]; then
        apt_install "${packages[@]}"
    fi
fi
if [[ $prometheus -eq 1 ]]; then
    "$BASH" "$here/install-prometheus.sh"
fi
survey
if [[ ${#missing[@]} -gt 0 ]]; then
    report_missing
    echo "test-deps: still missing after the install" >&2
    exit 1
fi
echo "test-deps: installed" >&2
