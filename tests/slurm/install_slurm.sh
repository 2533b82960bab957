#!/usr/bin/env bash
# Install a single-node Slurm (slurm-wlm: slurmctld + slurmd + client tools) and munge
# from Debian's archive, for the real-Slurm CI test (tests/workflow/test_slurm.py).
# Idempotent: exits at once when the binaries are already on PATH.
# Needs root (or passwordless sudo) and a reachable Debian/Ubuntu package mirror.
set -euo pipefail

needed=(slurmctld slurmd sbatch squeue sinfo munged)
missing=()
for bin in "${needed[@]}"; do
    command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || missing+=("$bin")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install_slurm.sh: slurm and munge already installed; nothing to do"
    exit 0
fi
echo "install_slurm.sh: missing ${missing[*]}; installing slurm-wlm and munge"

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_slurm.sh: apt-get not found; install slurm-wlm and munge with your package manager" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo -n"
fi

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
$SUDO apt-get update -qq
# --no-install-recommends keeps out mail servers and docs; the daemons need nothing else.
$SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
echo "install_slurm.sh: installed in $(( $(date +%s) - start )) s"
