#!/usr/bin/env bash
# Install what LEVELLER needs from the system, idempotently:
#  - Debian packages (bcc, OVS, iperf3, Prometheus + promtool, etcd, ...) when missing;
#  - a kernel headers link for bcc when the running kernel has none.
# A machine that already has everything is left untouched.
set -euo pipefail

PACKAGES=(
  python3-bpfcc libbpfcc libbpf-dev clang bpftool
  openvswitch-switch iperf3 ethtool iproute2 iptables tcpdump iputils-ping
  libibverbs-dev
  prometheus
  etcd-server etcd-client  # controllers on etcd (--etcd); tests start their own members on loopback
  systemd                  # systemd-analyze verify checks deploy/systemd (no systemd init needed)
  util-linux               # setpriv: a test starts the agent with only its unit's capabilities
  python3-seccomp          # a test applies the units' SystemCallFilter (seccomp) to the agent and the SDN app
  gcc make binutils        # the RDMA shim (make -C shim), also built from the sdist in a test (nm checks it)
  slurmctld slurmd slurm-client munge   # a real Slurm for the job-discovery tests (started by the tests)
  podman buildah crun runc uidmap debootstrap # the agent's container image, built from Debian's packages;
                           # runc: hybrid-cgroup hosts (crun refuses them, docs/operations.md)
)

log() { printf 'setup: %s\n' "$*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

kver=$(uname -r)
need_headers=0
if [ ! -e "/lib/modules/$kver/build/include" ]; then
  need_headers=1
  dpkg-query -W -f='${Status}' linux-headers-amd64 2>/dev/null | grep -q "install ok installed" \
    || missing+=(linux-headers-amd64)
fi

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]}"
    log "run 'sudo make setup' once (or install them yourself); continuing without them"
    exit 0
  fi
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  # OVS's (and etcd's) maintainer scripts try to start services; there may be no init system. Nothing
  # here needs the Debian etcd service: the tests start their own members.
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$need_headers" -eq 1 ] && [ "$(id -u)" -eq 0 ]; then
  # The running kernel ships no headers package; bcc's tc programs only use
  # stable uapi headers, so Debian's generic amd64 headers do.
  build=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
  common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$build" ] && [ -n "$common" ]; then
    mkdir -p "/lib/modules/$kver"
    ln -sfn "$build" "/lib/modules/$kver/build"
    ln -sfn "$common" "/lib/modules/$kver/source"
    log "linked /lib/modules/$kver/build -> $build"
  else
    log "no kernel headers found under /usr/src; bcc will not compile"
  fi
fi
