#!/usr/bin/env bash
# Install everything drtp needs on a Debian machine (run as root): the real
# Distribution registry and tools from apt, the Python package and its
# dependencies in ./.venv from PyPI. Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

# the registry under test, real clients for captures (skopeo, containerd + ctr), wrk for benchmarks, and a real
# Slurm + sshd for the cluster tests (started on loopback by the tests themselves), and Prometheus for the test that
# scrapes a run's live metrics, nginx for the caching-proxy tests (neither package's service is needed: the
# tests start their own on loopback)
APT_PACKAGES="docker-registry skopeo containerd wrk slurmctld slurmd slurm-client munge openssh-server openssh-sftp-server prometheus nginx"
missing=""
for pkg in $APT_PACKAGES; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$missing python3-venv python3-pip"
if [ -n "$missing" ]; then
    echo "install.sh: apt-get install$missing"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
echo "install.sh: ready ($(.venv/bin/drtp --version), $(/usr/bin/docker-registry --version 2>/dev/null | head -n1))"
