#!/bin/bash
# install.sh: the Debian 12 packages the cluster tests need (as root):
# MPICH for Hydra's mpiexec, Slurm (slurmctld, slurmd, srun) and munge,
# and the namespace tools. The packages' postinst scripts try to start
# munge and Slurm through invoke-rc.d; without systemd that is refused,
# which is what the tests want: they start their own daemons (pitfall 9).
set -euo pipefail
pkgs=(mpich iproute2 util-linux procps slurm-wlm slurm-client munge)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
