# shellcheck shell=bash
# Shared helpers for the Soft-RoCE (rdma_rxe) test VM. Sourced by run.sh.
#
# Everything that is expensive to make (host packages, the extracted Debian
# kernel, the base initramfs) is cached under $RMAGO_VM_DIR, keyed by the
# kernel version, so that a rerun only rebuilds the small per-run overlay.

RMAGO_VM_DIR=${RMAGO_VM_DIR:-/tmp/rmago-vm}
SOFTROCE_SRC=${SOFTROCE_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}

# Host packages the VM image is assembled from (never the kernel: that one is
# only downloaded and unpacked, not installed).
HOST_PACKAGES=(qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils
	perftest libibverbs-dev iproute2 kmod)

# Kernel modules to load in the VM, in this order; their dependencies from
# modules.dep are added in front of each. The crc32 crypto modules must be
# there before rdma_rxe or `rdma link add` fails with ENOENT.
VM_MODULES=(crc32_generic crc32-pclmul dummy rdma_rxe ib_uverbs rdma_ucm)

# Userspace tools copied into the base image with their shared libraries.
VM_TOOLS=(/usr/bin/ip /usr/bin/rdma /usr/bin/ibv_devinfo /usr/bin/ibv_devices
	/usr/bin/ib_write_lat /usr/bin/ib_read_lat /usr/bin/ib_atomic_lat /usr/bin/ib_send_lat
	/usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ibv_rc_pingpong)

log() { echo "[softroce $(date +%T)] $*" >&2; }
die() {
	echo "[softroce] FATAL: $*" >&2
	exit 2
}

# ensure_packages installs the host packages that are missing (needs root the
# first time; apt-get update is run only when something must be installed).
ensure_packages() {
	local missing=() p
	for p in "${HOST_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing host packages: ${missing[*]}"
	[ "$(id -u)" -eq 0 ] || die "need root to install: ${missing[*]}"
	apt-get update -qq >&2 || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install failed"
}

# kernel_version prints the version (e.g. 6.1.0-56-amd64) of the kernel the
# linux-image-amd64 metapackage currently points at. $RMAGO_VM_KERNEL
# overrides it; without package metadata, the newest cached kernel is used.
kernel_version() {
	if [ -n "${RMAGO_VM_KERNEL:-}" ]; then
		echo "$RMAGO_VM_KERNEL"
		return
	fi
	local kv
	kv=$(apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -1)
	if [ -z "$kv" ]; then
		kv=$(ls -1 "$RMAGO_VM_DIR/kernel" 2>/dev/null | sort -V | tail -1)
	fi
	[ -n "$kv" ] || die "cannot determine the Debian kernel version (apt-cache depends linux-image-amd64 gave nothing; run apt-get update)"
	echo "$kv"
}

# ensure_kernel downloads and unpacks linux-image-$KV into
# $RMAGO_VM_DIR/kernel/$KV/root (once) and runs depmod there.
# Sets KROOT, KMOD (its modules directory) and VMLINUZ.
ensure_kernel() {
	local kv=$1 kd=$RMAGO_VM_DIR/kernel/$1
	KROOT=$kd/root
	if [ ! -e "$kd/.done" ]; then
		log "downloading linux-image-$kv (not installed on the host)"
		rm -rf "$kd"
		mkdir -p "$kd/debs" "$KROOT"
		chmod 777 "$kd/debs" # apt-get download runs as _apt when it can
		(cd "$kd/debs" && apt-get download -qq "linux-image-$kv" >&2) || die "apt-get download linux-image-$kv failed"
		dpkg-deb -x "$kd"/debs/linux-image-"$kv"_*.deb "$KROOT" || die "dpkg-deb -x failed"
		rm -rf "$kd/debs"
		touch "$kd/.done"
	fi
	KMOD=
	local d
	for d in "$KROOT/lib/modules/$kv" "$KROOT/usr/lib/modules/$kv"; do
		[ -d "$d" ] && KMOD=$d && break
	done
	[ -n "$KMOD" ] || die "no modules directory in $KROOT"
	if [ ! -s "$KMOD/modules.dep" ]; then
		depmod -b "${KMOD%/lib/modules/$kv}" "$kv" || die "depmod failed"
	fi
	VMLINUZ=$KROOT/boot/vmlinuz-$kv
	[ -f "$VMLINUZ" ] || die "no $VMLINUZ"
}

# copy_with_deps ROOT FILE [DEST]: copies FILE to ROOT/DEST (default: the same
# path) and every shared library ldd lists for it to the same path in ROOT.
copy_with_deps() {
	local root=$1 f=$2 dest=${3:-$2} lib
	mkdir -p "$root$(dirname "$dest")"
	cp -L "$f" "$root$dest"
	ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
		[ -e "$root$lib" ] && continue
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
}

# mod_path NAME prints the modules.dep path of module NAME ("-" and "_" are
# interchangeable in module names).
mod_path() {
	local re=${1//[-_]/[-_]}
	grep -o "^[^:]*/${re}\.ko[.a-z]*:" "$KMOD/modules.dep" | head -1 | tr -d :
}

# build_base KV: the cached base initramfs (busybox, iproute2, rdma-core,
# perftest, rxe provider, kernel modules, /init). Sets BASE_CPIO.
build_base() {
	local kv=$1 stamp
	BASE_CPIO=$RMAGO_VM_DIR/base-$kv.cpio.gz
	# Rebuild when the init scripts or this file change.
	stamp=$(cat "$SOFTROCE_SRC/vm-init" "$SOFTROCE_SRC/perfpair.sh" "${BASH_SOURCE[0]}" | md5sum | cut -c1-16)
	if [ -s "$BASE_CPIO" ] && [ "$(cat "$BASE_CPIO.stamp" 2>/dev/null)" = "$stamp" ]; then
		return 0
	fi
	log "building base initramfs for $kv"
	local R=$RMAGO_VM_DIR/base-root
	rm -rf "$R"
	mkdir -p "$R"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,root,rmago/bin,rmago/cmd}
	ln -s usr/bin "$R/bin"
	ln -s usr/sbin "$R/sbin"
	ln -s usr/lib "$R/lib"
	ln -s usr/lib64 "$R/lib64"

	# busybox and its applets, not shadowing the real tools copied below
	cp /usr/bin/busybox "$R/usr/bin/busybox"
	local a t
	for a in $(/usr/bin/busybox --list); do
		[ -e "$R/usr/bin/$a" ] || ln -s busybox "$R/usr/bin/$a"
	done
	for t in "${VM_TOOLS[@]}"; do
		[ -e "$t" ] || die "missing host tool $t"
		rm -f "$R$t"
		copy_with_deps "$R" "$t"
	done

	# the rxe userspace provider and its driver file
	local prov
	prov=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
	[ -n "$prov" ] || die "no librxe provider (ibverbs-providers)"
	copy_with_deps "$R" "$prov"
	mkdir -p "$R/etc/libibverbs.d"
	cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"

	echo 'root:x:0:0:root:/root:/bin/sh' >"$R/etc/passwd"
	echo 'root:x:0:' >"$R/etc/group"
	printf '127.0.0.1 localhost\n192.0.2.1 rmago-vm\n' >"$R/etc/hosts"

	# kernel modules: each wanted module after its dependencies
	local md=$R/lib/modules/$kv
	mkdir -p "$md"
	: >"$R/rmago/modules"
	declare -A seen=()
	add_mod() {
		local rel=$1 d deps out
		[ -n "${seen[$rel]:-}" ] && return 0
		seen[$rel]=1
		deps=$(grep "^$rel:" "$KMOD/modules.dep" | cut -d: -f2)
		for d in $(echo "$deps" | tr ' ' '\n' | tac); do add_mod "$d"; done
		out=${rel%.ko*}.ko
		mkdir -p "$md/$(dirname "$out")"
		case $rel in
		*.ko) cp "$KMOD/$rel" "$md/$out" ;;
		*.ko.xz) xz -dc "$KMOD/$rel" >"$md/$out" ;;
		*.ko.zst) zstd -qdc "$KMOD/$rel" >"$md/$out" ;;
		*.ko.gz) gzip -dc "$KMOD/$rel" >"$md/$out" ;;
		esac
		echo "$out" >>"$R/rmago/modules"
	}
	local m rel
	for m in "${VM_MODULES[@]}"; do
		rel=$(mod_path "$m")
		if [ -z "$rel" ]; then
			# crc32-pclmul may be built in or absent on some kernels
			log "note: module $m not found, skipped"
			continue
		fi
		add_mod "$rel"
	done

	install -m 0755 "$SOFTROCE_SRC/vm-init" "$R/init"
	install -m 0755 "$SOFTROCE_SRC/perfpair.sh" "$R/rmago/bin/perfpair"
	(cd "$R" && find . | LC_ALL=C sort >"$BASE_CPIO.list.tmp" &&
		busybox cpio -o -H newc <"$BASE_CPIO.list.tmp" 2>/dev/null | gzip -1) >"$BASE_CPIO.tmp" ||
		die "cpio failed"
	sed 's|^\.||' "$BASE_CPIO.list.tmp" >"$BASE_CPIO.list"
	rm -f "$BASE_CPIO.list.tmp"
	mv "$BASE_CPIO.tmp" "$BASE_CPIO"
	echo "$stamp" >"$BASE_CPIO.stamp"
	rm -rf "$R"
	log "base initramfs: $(du -h "$BASE_CPIO" | cut -f1)"
}
