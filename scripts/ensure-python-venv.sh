#!/usr/bin/env bash
# Debian's python3 ships without venv/ensurepip; install python3-venv when it is missing.
set -euo pipefail
python=${1:-python3}
if "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  exit 0
fi
echo "== $python lacks venv/ensurepip: installing python3-venv"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq python3-venv
