#!/bin/bash
# install.sh: the Debian 12 packages the cluster tests need (as root):
# MPICH for Hydra's mpiexec, Slurm (slurmctld, slurmd, srun) and munge,
# the namespace tools, and for the PMIx cases libpmix-dev (the cgo client's
# headers and pkg-config file; slurmd's pmix plugin dlopens its libpmix.so)
# with a C compiler, and Open MPI's mpirun (openmpi-bin). The packages'
# postinst scripts try to start munge and Slurm through invoke-rc.d; without
# systemd that is refused, which is what the tests want: they start their
# own daemons (pitfall 9).
#
# Open MPI and MPICH share Debian's alternatives: openmpi-bin (priority 50)
# would take mpirun/mpiexec (and mpicc, group "mpi") from MPICH (40). The
# tests call mpiexec for Hydra and mpirun.openmpi by its own name, so both
# groups are pinned to MPICH, before the install (so that nothing else on
# the machine sees mpiexec change) and after it.
set -euo pipefail
pkgs=(mpich iproute2 util-linux procps slurm-wlm slurm-client munge
	libpmix-dev pkg-config gcc libc6-dev openmpi-bin)
pin_mpich() {
	[ -e /usr/bin/mpirun.mpich ] && update-alternatives --quiet --set mpirun /usr/bin/mpirun.mpich
	[ -e /usr/bin/mpicc.mpich ] && update-alternatives --quiet --set mpi /usr/bin/mpicc.mpich
	true
}
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} != 0 ]; then
	export DEBIAN_FRONTEND=noninteractive
	pin_mpich
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
pin_mpich
[ "$(readlink -f /usr/bin/mpiexec)" = /usr/bin/mpiexec.hydra ] ||
	{ echo "install.sh: mpiexec is $(readlink -f /usr/bin/mpiexec), want MPICH's mpiexec.hydra" >&2; exit 1; }
