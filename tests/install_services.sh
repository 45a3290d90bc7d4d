#!/usr/bin/env bash
# The real servers some tests start and stop themselves (tests/test_slurm.py: a single-node SLURM;
# tests/test_search_postgres.py: PostgreSQL), and the headless browser tests/test_analysis_html.py opens the
# HTML report in (Debian's chromium). Installs Debian's packages when they are missing and this runs as
# root with apt-get; otherwise says which tests will be skipped. policy-rc.d keeps the package scripts from
# starting any daemon: the tests start their own, in temporary folders.
set -euo pipefail
missing=()
{ command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged; } >/dev/null || \
  missing+=(slurmctld slurmd slurm-client munge)
{ command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "tests: ${missing[*]} not installed (needs root and apt-get): the SLURM/PostgreSQL/browser tests will be skipped" >&2
  exit 0
fi
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
echo "tests: installing ${missing[*]} (Debian packages, about a minute)" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
